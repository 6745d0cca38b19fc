package pool

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Target is what the watcher feeds: epp.Proxy has it.
type Target interface {
	SetEndpoints(eps []string) error
}

// Watcher follows one InferencePool and its pods.
type Watcher struct {
	Dynamic   dynamic.Interface    // reads the InferencePool
	Pods      kubernetes.Interface // reads the pods
	Namespace string               // the pool's namespace (its pods are in it too)
	Name      string               // the pool's name
	Target    Target
	// Resync relists the informers' caches this often; 0: never (the
	// watches are enough, and a relist of a large namespace costs).
	Resync time.Duration
	Logger *slog.Logger
}

// podWatch is the pod informer of one selector, restarted when the
// pool's selector changes (the API server filters by it).
type podWatch struct {
	sel    string
	inf    cache.SharedIndexInformer
	cancel context.CancelFunc
	done   chan struct{}
}

// Run watches until ctx ends, giving Target the pool's ready endpoints
// after each change: none while the pool does not exist or is invalid.
func (w *Watcher) Run(ctx context.Context) error {
	if w.Dynamic == nil || w.Pods == nil || w.Target == nil || w.Namespace == "" || w.Name == "" {
		return errors.New("pool: watcher needs clients, a target, a namespace and a name")
	}
	log := w.Logger
	if log == nil {
		log = slog.Default()
	}
	// One goroutine does all the work; informer handlers only kick it,
	// so events from the pool and the pods never race.
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	}

	poolInf := dynamicinformer.NewFilteredDynamicInformer(w.Dynamic, GVR, w.Namespace, w.Resync, cache.Indexers{},
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", w.Name).String()
		}).Informer()
	if _, err := poolInf.AddEventHandler(handler); err != nil {
		return err
	}
	poolCtx, stopPool := context.WithCancel(ctx)
	poolDone := make(chan struct{})
	go func() { defer close(poolDone); poolInf.RunWithContext(poolCtx) }()
	go func() {
		if cache.WaitForCacheSync(poolCtx.Done(), poolInf.HasSynced) {
			poke()
		}
	}()

	var pods *podWatch
	stopPods := func() {
		if pods != nil {
			pods.cancel()
			<-pods.done
			pods = nil
		}
	}
	defer func() {
		stopPods()
		stopPool()
		<-poolDone
	}()

	var last []string
	published := false
	publish := func(eps []string) {
		if published && slices.Equal(eps, last) {
			return
		}
		if err := w.Target.SetEndpoints(eps); err != nil {
			log.Error("pool: setting endpoints", "pool", w.Name, "err", err)
			return
		}
		last, published = eps, true
		log.Info("pool: endpoints", "pool", w.Name, "count", len(eps))
	}

	key := w.Namespace + "/" + w.Name
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		}
		if !poolInf.HasSynced() {
			continue
		}
		obj, exists, _ := poolInf.GetStore().GetByKey(key)
		if !exists {
			stopPods()
			publish([]string{})
			continue
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		spec, err := parseSpec(u)
		if err != nil {
			log.Error("pool: invalid InferencePool", "err", err)
			stopPods()
			publish([]string{})
			continue
		}
		sel := spec.Selector.String()
		if pods == nil || pods.sel != sel {
			stopPods()
			pods, err = w.watchPods(ctx, sel, handler, poke)
			if err != nil {
				return err
			}
		}
		if !pods.inf.HasSynced() {
			continue // the sync kicks again; publishing now would empty the pool
		}
		var list []*corev1.Pod
		for _, o := range pods.inf.GetStore().List() {
			if p, ok := o.(*corev1.Pod); ok {
				list = append(list, p)
			}
		}
		publish(endpoints(spec, list))
	}
}

func (w *Watcher) watchPods(ctx context.Context, sel string, h cache.ResourceEventHandler, poke func()) (*podWatch, error) {
	f := informers.NewSharedInformerFactoryWithOptions(w.Pods, w.Resync,
		informers.WithNamespace(w.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel }))
	inf := f.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(h); err != nil {
		return nil, err
	}
	pctx, cancel := context.WithCancel(ctx)
	pw := &podWatch{sel: sel, inf: inf, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(pw.done); inf.RunWithContext(pctx) }()
	go func() {
		if cache.WaitForCacheSync(pctx.Done(), inf.HasSynced) {
			poke()
		}
	}()
	return pw, nil
}
