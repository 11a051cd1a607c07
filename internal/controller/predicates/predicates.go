// Package predicates owns the event filters that Annex's controllers share.
package predicates

import (
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// SpecChanged passes creations, deletions and generic events, and the
// updates that change an object's generation (its spec) or its UID.
//
// The UID matters after a watch gap (an API server restart): an object
// deleted and made again under the same name, both unseen by the informer,
// arrives on relist as an update of the old one, and both may be at
// generation 1. controller-runtime's GenerationChangedPredicate drops that
// update, and the new object is never reconciled (measured: a ResourceSlice
// of a peering made again right after a forced unpeer was never answered).
func SpecChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			if e.ObjectOld == nil || e.ObjectNew == nil {
				return false
			}
			return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() || e.ObjectOld.GetUID() != e.ObjectNew.GetUID()
		},
	}
}

// AnnotationChanged passes creations, deletions and generic events, and the
// updates that change the value of annotation key (or whether it is set).
// Unlike controller-runtime's AnnotationChangedPredicate it ignores the
// other annotations: an object's writer (a tenant) may change those at will,
// and each change would otherwise cost a reconcile that reads none of them.
func AnnotationChanged(key string) predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			if e.ObjectOld == nil || e.ObjectNew == nil {
				return false
			}
			o, oldSet := e.ObjectOld.GetAnnotations()[key]
			n, newSet := e.ObjectNew.GetAnnotations()[key]
			return o != n || oldSet != newSet
		},
	}
}
