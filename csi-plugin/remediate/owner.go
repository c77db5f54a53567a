package remediate

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// recreatedBy says whether deleting pod makes its controller create a new one, and describes the owner either
// way (for the log and the event); an error when the owner could not be read (no decision then).
//
// A controller reference is only a claim, written by whoever created the pod. So the owner is read (its metadata,
// as the garbage collector reads owners), and trusted only when it exists with the reference's UID (isDangling in
// pkg/controller/garbagecollector/garbagecollector.go calls any other owner absent, and the pod is collected) and
// is not being deleted (its controller then creates no pods: syncReplicaSet in
// pkg/controller/replicaset/replica_set.go skips manageReplicas).
func (r *Remediator) recreatedBy(ctx context.Context, pod *corev1.Pod) (bool, string, error) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return false, "no controller owns it", nil
	}
	owner := ref.Kind + "/" + ref.Name
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	res, known := recreatingOwners[ref.Kind]
	if !known || err != nil || gv.Group != res.Group {
		return false, owner + " is not a controller known to recreate deleted pods", nil
	}
	obj, err := r.cfg.Owners.Resource(res).Namespace(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) || err == nil && obj.UID != ref.UID:
		return false, fmt.Sprintf("%s does not exist (none of that name with UID %s in namespace %s)", owner, ref.UID, pod.Namespace), nil
	case err != nil:
		return false, owner, fmt.Errorf("reading %s, the controller of pod %s/%s: %w", owner, pod.Namespace, pod.Name, err)
	case obj.DeletionTimestamp != nil:
		return false, owner + " is being deleted", nil
	}
	return true, owner, nil
}
