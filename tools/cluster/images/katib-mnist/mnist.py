"""A stand-in for Katib's examples/v1beta1/trial-images/pytorch-mnist/mnist.py (Apache-2.0,
The Kubeflow Authors) in the test image katib-mnist: the same flags, and per epoch the same
"Train Epoch: E [N/60000 (P%)]\tloss=L" lines and the closing
"{metricName: accuracy, metricValue: A};{metricName: loss, metricValue: L}" line, in the same
logging format, with a loss computed from --lr and --momentum instead of training on MNIST
(which the real one downloads). Its lines go to stdout, where sweeper reads a command's
metrics (the real script logs to stderr, which Katib's StdOut collector reads too).

$STANDIN_SECONDS (default 3) is how long an epoch takes. No torch, no sweeper: python3 only.
"""

import argparse
import logging
import math
import os
import sys
import time

TRAIN = 60000


def main() -> None:
    parser = argparse.ArgumentParser(description="PyTorch MNIST Example (stand-in)")
    parser.add_argument("--batch-size", type=int, default=64, metavar="N")
    parser.add_argument("--test-batch-size", type=int, default=1000, metavar="N")
    parser.add_argument("--epochs", type=int, default=10, metavar="N")
    parser.add_argument("--lr", type=float, default=0.01, metavar="LR")
    parser.add_argument("--momentum", type=float, default=0.5, metavar="M")
    parser.add_argument("--no-cuda", action="store_true", default=False)
    parser.add_argument("--seed", type=int, default=1, metavar="S")
    parser.add_argument("--log-interval", type=int, default=10, metavar="N")
    parser.add_argument("--log-path", type=str, default="")
    parser.add_argument("--save-model", action="store_true", default=False)
    parser.add_argument("--logger", type=str, choices=["standard", "hypertune"],
                        default="standard")
    parser.add_argument("--backend", type=str, choices=["gloo", "nccl", "mpi"], default="gloo")
    args = parser.parse_args()
    logging.basicConfig(format="%(asctime)s %(levelname)-8s %(message)s",
                        datefmt="%Y-%m-%dT%H:%M:%SZ", level=logging.DEBUG, stream=sys.stdout)
    seconds = float(os.environ.get("STANDIN_SECONDS", "3"))
    batches = math.ceil(TRAIN / args.batch_size)
    logged = list(range(0, batches, args.log_interval))
    # 10 lines per epoch: every log_interval-th batch, thinned as the real one's would be read.
    shown = logged[:: max(1, len(logged) // 10)]
    floor = 0.2 + 40 * (args.lr - 0.03) ** 2 + (args.momentum - 0.7) ** 2
    loss = floor
    for epoch in range(1, args.epochs + 1):
        for k, batch in enumerate(shown):
            progress = (epoch - 1 + k / len(shown)) / args.epochs
            loss = floor + 2.1 * math.exp(-6 * progress)
            seen, percent = batch * args.batch_size, 100.0 * batch / batches
            logging.info(f"Train Epoch: {epoch} [{seen}/{TRAIN} ({percent:.0f}%)]\tloss={loss:.4f}")
            time.sleep(seconds / len(shown))
        accuracy = max(0.0, min(1.0, 1.0 - loss / 2.5))
        logging.info(f"{{metricName: accuracy, metricValue: {accuracy:.4f}}};"
                     f"{{metricName: loss, metricValue: {loss:.4f}}}\n")


if __name__ == "__main__":
    main()
