// Command jobset-manager is JobSet's manager (sigs.k8s.io/jobset's main.go) cut down for the
// local test control plane: the JobSet and pod reconcilers and JobSet's admission webhooks
// (JobSet defaulting and validation, the pod mutating and validating hooks of exclusive
// placement). Left out on purpose: internal cert management (the caller hands over a
// certificate in webhook.certDir), the metrics server and leader election (one replica).
package main

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	configapi "sigs.k8s.io/jobset/api/config/v1alpha1"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	"sigs.k8s.io/jobset/pkg/config"
	"sigs.k8s.io/jobset/pkg/controllers"
	"sigs.k8s.io/jobset/pkg/metrics"
	"sigs.k8s.io/jobset/pkg/util/useragent"
	"sigs.k8s.io/jobset/pkg/version"
	"sigs.k8s.io/jobset/pkg/webhooks"
)

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(jobset.AddToScheme(scheme))
	utilruntime.Must(configapi.AddToScheme(scheme))
}

func main() {
	var configFile string
	flag.StringVar(&configFile, "config", "", "JobSet Configuration file (config.jobset.x-k8s.io/v1alpha1).")
	zapOptions := zap.Options{}
	zapOptions.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOptions)))

	if err := run(configFile); err != nil {
		setupLog.Error(err, "jobset-manager failed")
		os.Exit(1)
	}
}

func run(configFile string) error {
	options, cfg, err := config.Load(scheme, configFile)
	if err != nil {
		return fmt.Errorf("loading the configuration: %w", err)
	}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(cfg.FeatureGates); err != nil {
		return fmt.Errorf("setting feature gates: %w", err)
	}
	if cfg.InternalCertManagement != nil && *cfg.InternalCertManagement.Enable {
		return errors.New("internalCertManagement.enable must be false: put tls.crt and tls.key in webhook.certDir")
	}
	if cfg.LeaderElection != nil && cfg.LeaderElection.LeaderElect != nil && *cfg.LeaderElection.LeaderElect {
		return errors.New("leaderElection.leaderElect must be false: this manager runs as one replica")
	}
	setupLog.Info("Initializing", "gitVersion", version.GitVersion, "featureGates", cfg.FeatureGates)

	options.LeaderElection = false
	options.Metrics.BindAddress = "0"
	metrics.Register()

	kubeConfig := ctrl.GetConfigOrDie()
	kubeConfig.UserAgent = useragent.Default()
	kubeConfig.QPS = *cfg.ClientConnection.QPS
	kubeConfig.Burst = int(*cfg.ClientConnection.Burst)
	mgr, err := ctrl.NewManager(kubeConfig, options)
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}

	ctx := ctrl.SetupSignalHandler()
	if err := controllers.SetupJobSetIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("setting up the JobSet indexes: %w", err)
	}
	if err := controllers.SetupPodIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("setting up the pod indexes: %w", err)
	}
	jobSets := controllers.NewJobSetReconciler(mgr.GetClient(), mgr.GetScheme(), mgr.GetEventRecorder("jobset"))
	if err := jobSets.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the JobSet controller: %w", err)
	}
	pods := controllers.NewPodReconciler(mgr.GetClient(), mgr.GetScheme(), mgr.GetEventRecorder("pod"))
	if err := pods.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the pod controller: %w", err)
	}
	if err := webhooks.Setup(mgr); err != nil {
		return fmt.Errorf("setting up the webhooks: %w", err)
	}

	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	// Ready once the webhook server listens, as in JobSet: callers may create JobSets then.
	if err := mgr.AddReadyzCheck("readyz", func(req *http.Request) error {
		return mgr.GetWebhookServer().StartedChecker()(req)
	}); err != nil {
		return fmt.Errorf("adding the ready check: %w", err)
	}

	setupLog.Info("Starting manager")
	return mgr.Start(ctx)
}
