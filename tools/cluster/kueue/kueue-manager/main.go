// Command kueue-manager is Kueue's manager (sigs.k8s.io/kueue/cmd/kueue) cut down for the
// local test control plane: core controllers, queue manager and cache, scheduler, Kueue's
// admission webhooks and only the batch/Job integration. Left out on purpose: internal cert
// management (the caller hands over a certificate in webhook.certDir), the metrics server,
// the visibility server, MultiKueue, ProvisioningRequest and Topology-Aware Scheduling,
// whose feature gates are forced off so no controller expects what is not wired up.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"

	zaplog "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/component-base/featuregate"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	configapiv1beta1 "sigs.k8s.io/kueue/apis/config/v1beta1"
	configapi "sigs.k8s.io/kueue/apis/config/v1beta2"
	kueuealpha "sigs.k8s.io/kueue/apis/kueue/v1alpha1"
	kueuev1beta1 "sigs.k8s.io/kueue/apis/kueue/v1beta1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	qcache "sigs.k8s.io/kueue/pkg/cache/queue"
	schdcache "sigs.k8s.io/kueue/pkg/cache/scheduler"
	"sigs.k8s.io/kueue/pkg/config"
	"sigs.k8s.io/kueue/pkg/constants"
	"sigs.k8s.io/kueue/pkg/controller/core"
	"sigs.k8s.io/kueue/pkg/controller/core/indexer"
	"sigs.k8s.io/kueue/pkg/controller/jobframework"
	"sigs.k8s.io/kueue/pkg/features"
	"sigs.k8s.io/kueue/pkg/metrics"
	"sigs.k8s.io/kueue/pkg/scheduler"
	preemptexpectations "sigs.k8s.io/kueue/pkg/scheduler/preemption/expectations"
	"sigs.k8s.io/kueue/pkg/scheduler/preemption/fairsharing"
	"sigs.k8s.io/kueue/pkg/util/kubeversion"
	utillogging "sigs.k8s.io/kueue/pkg/util/logging"
	"sigs.k8s.io/kueue/pkg/util/useragent"
	"sigs.k8s.io/kueue/pkg/util/waitforpodsready"
	"sigs.k8s.io/kueue/pkg/version"
	"sigs.k8s.io/kueue/pkg/webhooks"

	// The only job integration linked in: batch/v1 Job ("batch/job").
	_ "sigs.k8s.io/kueue/pkg/controller/jobs/job"
)

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")

	// Gates whose controllers this binary does not set up.
	forcedOff = map[featuregate.Feature]bool{
		features.TopologyAwareScheduling: false,
		features.MultiKueue:              false,
		features.VisibilityOnDemand:      false,
	}
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(kueue.AddToScheme(scheme))
	utilruntime.Must(kueuev1beta1.AddToScheme(scheme))
	utilruntime.Must(kueuealpha.AddToScheme(scheme))
	utilruntime.Must(configapiv1beta1.AddToScheme(scheme))
	utilruntime.Must(configapi.AddToScheme(scheme))
}

func main() {
	var configFile string
	flag.StringVar(&configFile, "config", "", "Kueue Configuration file (config.kueue.x-k8s.io/v1beta2).")
	zapOptions := zap.Options{
		TimeEncoder: zapcore.RFC3339NanoTimeEncoder,
		ZapOpts:     []zaplog.Option{zaplog.AddCaller(), zaplog.WrapCore(utillogging.NewCustomLogProcessor)},
	}
	zapOptions.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOptions)))

	if err := run(configFile); err != nil {
		setupLog.Error(err, "kueue-manager failed")
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
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(toStrings(forcedOff)); err != nil {
		return fmt.Errorf("turning off unsupported feature gates: %w", err)
	}
	if cfg.InternalCertManagement != nil && *cfg.InternalCertManagement.Enable {
		return errors.New("internalCertManagement.enable must be false: put tls.crt and tls.key in webhook.certDir")
	}
	setupLog.Info("Initializing", "gitVersion", version.GitVersion, "frameworks", cfg.Integrations.Frameworks)

	config.AddWebhookSettingsTo(&options, &cfg)
	options.Metrics.BindAddress = "0"
	metrics.Register()

	kubeConfig := ctrl.GetConfigOrDie()
	kubeConfig.UserAgent = useragent.Default()
	if *cfg.ClientConnection.QPS >= 0.0 {
		kubeConfig.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(*cfg.ClientConnection.QPS, int(*cfg.ClientConnection.Burst))
	}
	ctx := ctrl.SetupSignalHandler()
	mgr, err := ctrl.NewManager(kubeConfig, options)
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}

	lqMetrics := metrics.NewLocalQueueMetricsConfig(cfg.Metrics.LocalQueueMetrics)
	cacheOptions := []schdcache.Option{
		schdcache.WithPodsReadyTracking(blockForPodsReady(&cfg)),
		schdcache.WithResourceMetrics(cfg.Metrics.EnableClusterQueueResources),
		schdcache.WithLocalQueueMetrics(lqMetrics),
	}
	queueOptions := []qcache.Option{
		qcache.WithPodsReadyRequeuingTimestamp(podsReadyRequeuingTimestamp(&cfg)),
		qcache.WithLocalQueueMetrics(lqMetrics),
	}
	if cfg.FairSharing != nil {
		cacheOptions = append(cacheOptions, schdcache.WithFairSharing(fairsharing.Enabled(cfg.FairSharing)))
	}
	if cfg.AdmissionFairSharing != nil {
		queueOptions = append(queueOptions, qcache.WithAdmissionFairSharing(cfg.AdmissionFairSharing))
		cacheOptions = append(cacheOptions, schdcache.WithAdmissionFairSharing(cfg.AdmissionFairSharing))
	}
	cCache := schdcache.New(mgr.GetClient(), cacheOptions...)
	requeuer := qcache.NewRequeuer()
	if err := mgr.Add(requeuer); err != nil {
		return fmt.Errorf("adding the workload requeuer: %w", err)
	}
	preemptionExpectations := preemptexpectations.New()
	queueOptions = append(queueOptions, qcache.WithPreemptionExpectations(preemptionExpectations))
	queues := qcache.NewManager(mgr.GetClient(), cCache, requeuer, queueOptions...)

	frameworks := jobframework.WithEnabledFrameworks(cfg.Integrations.Frameworks)
	if err := indexer.Setup(ctx, mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("setting up indexes: %w", err)
	}
	if err := jobframework.SetupIndexes(ctx, mgr.GetFieldIndexer(), frameworks); err != nil {
		return fmt.Errorf("setting up job indexes: %w", err)
	}

	versionFetcher := kubeversion.NewServerVersionFetcher(discovery.NewDiscoveryClientForConfigOrDie(kubeConfig))
	if err := mgr.Add(versionFetcher); err != nil {
		return fmt.Errorf("adding the server version fetcher: %w", err)
	}
	if err := versionFetcher.FetchServerVersion(); err != nil {
		return fmt.Errorf("fetching the server version: %w", err)
	}

	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	// Ready once the webhook server listens, as in Kueue: callers may create Jobs then.
	if err := mgr.AddReadyzCheck("readyz", func(req *http.Request) error {
		return mgr.GetWebhookServer().StartedChecker()(req)
	}); err != nil {
		return fmt.Errorf("adding the ready check: %w", err)
	}

	if failed, err := core.SetupControllers(mgr, queues, cCache, &cfg, nil, preemptionExpectations, nil); err != nil {
		return fmt.Errorf("setting up the %s controller: %w", failed, err)
	}
	nsSelector, err := metav1.LabelSelectorAsSelector(cfg.ManagedJobsNamespaceSelector)
	if err != nil {
		return fmt.Errorf("parsing managedJobsNamespaceSelector: %w", err)
	}
	if err := jobframework.SetupControllers(ctx, mgr, setupLog,
		frameworks,
		jobframework.WithManageJobsWithoutQueueName(cfg.ManageJobsWithoutQueueName),
		jobframework.WithWaitForPodsReady(cfg.WaitForPodsReady),
		jobframework.WithKubeServerVersion(versionFetcher),
		jobframework.WithManagerName(constants.KueueName),
		jobframework.WithLabelKeysToCopy(cfg.Integrations.LabelKeysToCopy),
		jobframework.WithCache(cCache),
		jobframework.WithQueues(queues),
		jobframework.WithObjectRetentionPolicies(cfg.ObjectRetentionPolicies),
		jobframework.WithManagedJobsNamespaceSelector(nsSelector),
	); err != nil {
		return fmt.Errorf("setting up the job integrations: %w", err)
	}
	if failed, err := webhooks.Setup(mgr, nil); err != nil {
		return fmt.Errorf("setting up the %s webhook: %w", failed, err)
	}

	go queues.CleanUpOnContext(ctx)
	go cCache.CleanUpOnContext(ctx)

	sched := scheduler.New(queues, cCache, mgr.GetClient(), mgr.GetEventRecorderFor(constants.AdmissionName),
		scheduler.WithPodsReadyRequeuingTimestamp(podsReadyRequeuingTimestamp(&cfg)),
		scheduler.WithFairSharing(cfg.FairSharing),
		scheduler.WithAdmissionFairSharing(cfg.AdmissionFairSharing),
		scheduler.WithPreemptionExpectations(preemptionExpectations),
	)
	if err := mgr.Add(sched); err != nil {
		return fmt.Errorf("adding the scheduler: %w", err)
	}

	setupLog.Info("Starting manager")
	return mgr.Start(ctx)
}

func toStrings(gates map[featuregate.Feature]bool) map[string]bool {
	out := make(map[string]bool, len(gates))
	for k, v := range gates {
		out[string(k)] = v
	}
	return out
}

func blockForPodsReady(cfg *configapi.Configuration) bool {
	return waitforpodsready.Enabled(cfg.WaitForPodsReady) &&
		cfg.WaitForPodsReady.BlockAdmission != nil && *cfg.WaitForPodsReady.BlockAdmission
}

func podsReadyRequeuingTimestamp(cfg *configapi.Configuration) configapi.RequeuingTimestamp {
	if cfg.WaitForPodsReady != nil && cfg.WaitForPodsReady.RequeuingStrategy != nil &&
		cfg.WaitForPodsReady.RequeuingStrategy.Timestamp != nil {
		return *cfg.WaitForPodsReady.RequeuingStrategy.Timestamp
	}
	return configapi.EvictionTimestamp
}
