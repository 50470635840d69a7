package controlplane

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	yamlutil "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
)

// EdihubUserBinding is the name of the test-only RoleBinding that binds the
// manifest's Role to user EdihubUser as well.
const EdihubUserBinding = "edihub-leader-election-test-user"

// DecodeManifest decodes every object of a multi-document YAML file,
// strictly: an unknown or misspelt field is an error, as it would be for
// kubectl apply --validate=strict.
func DecodeManifest(path string) ([]runtime.Object, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	decoder := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	reader := yamlutil.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []runtime.Object
	for i := 1; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		js, err := yamlutil.ToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		if s := string(bytes.TrimSpace(js)); s == "null" || s == "" {
			continue // only comments or blank
		}
		obj, _, err := decoder.Decode(js, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		objs = append(objs, obj)
	}
}

// applyRBAC creates in namespace ns every object of the RBAC manifest at
// path as it ships (ServiceAccount, Role, RoleBinding), then a RoleBinding
// named EdihubUserBinding with the manifest RoleBinding's roleRef and the
// subject user EdihubUser, the identity the tests' edihub token carries. It
// returns the bound Role. An object that exists (kept etcd data) is
// replaced, so the manifest as it is now applies.
func applyRBAC(ctx context.Context, cs kubernetes.Interface, path, ns string) (*rbacv1.Role, error) {
	objs, err := DecodeManifest(path)
	if err != nil {
		return nil, err
	}
	var binding *rbacv1.RoleBinding
	roles := map[string]*rbacv1.Role{}
	for _, obj := range objs {
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			o.Namespace = ns
			sas := cs.CoreV1().ServiceAccounts(ns)
			err = replace(ctx, o, sas.Create, sas.Delete)
		case *rbacv1.Role:
			o.Namespace = ns
			roles[o.Name] = o
			rs := cs.RbacV1().Roles(ns)
			err = replace(ctx, o, rs.Create, rs.Delete)
		case *rbacv1.RoleBinding:
			o.Namespace = ns
			if binding != nil {
				return nil, fmt.Errorf("%s: more than one RoleBinding; the harness binds user %q with the roleRef of exactly one", path, EdihubUser)
			}
			binding = o
			rbs := cs.RbacV1().RoleBindings(ns)
			err = replace(ctx, o, rbs.Create, rbs.Delete)
		default:
			return nil, fmt.Errorf("%s: unexpected %T; the harness applies only ServiceAccount, Role and RoleBinding", path, obj)
		}
		if err != nil {
			return nil, fmt.Errorf("apply %s: %w", path, err)
		}
	}
	if binding == nil {
		return nil, fmt.Errorf("%s: no RoleBinding", path)
	}
	role := roles[binding.RoleRef.Name]
	if binding.RoleRef.Kind != "Role" || role == nil {
		return nil, fmt.Errorf("%s: RoleBinding %s refers to %s %q, not to a Role of the same file", path, binding.Name, binding.RoleRef.Kind, binding.RoleRef.Name)
	}
	userBinding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: EdihubUserBinding, Namespace: ns},
		RoleRef:    binding.RoleRef,
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: EdihubUser}},
	}
	rbs := cs.RbacV1().RoleBindings(ns)
	if err := replace(ctx, userBinding, rbs.Create, rbs.Delete); err != nil {
		return nil, fmt.Errorf("bind user %s: %w", EdihubUser, err)
	}
	return role, nil
}

// replace creates obj; when it exists, it deletes it and creates it again
// (a RoleBinding's roleRef cannot be updated).
func replace[T metav1.Object](ctx context.Context, obj T,
	create func(context.Context, T, metav1.CreateOptions) (T, error),
	del func(context.Context, string, metav1.DeleteOptions) error,
) error {
	_, err := create(ctx, obj, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err := del(ctx, obj.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	_, err = create(ctx, obj, metav1.CreateOptions{})
	return err
}

// waitAuthorized waits until the API server's authorizer, which works from
// watch caches, lets the client cs do what the first rule of role grants in
// namespace ns (on its first resource name, if it names any), so that a
// test's first request is not refused for a binding the server has not seen
// yet.
func waitAuthorized(ctx context.Context, cs kubernetes.Interface, role *rbacv1.Role, ns string) error {
	if len(role.Rules) == 0 || len(role.Rules[0].Verbs) == 0 ||
		len(role.Rules[0].APIGroups) == 0 || len(role.Rules[0].Resources) == 0 {
		return fmt.Errorf("Role %s: first rule has no verb, API group or resource", role.Name)
	}
	rule := role.Rules[0]
	attrs := &authorizationv1.ResourceAttributes{
		Namespace: ns, Verb: rule.Verbs[0], Group: rule.APIGroups[0], Resource: rule.Resources[0],
	}
	if len(rule.ResourceNames) > 0 {
		// A rule restricted to names grants nothing on the unnamed resource.
		attrs.Name = rule.ResourceNames[0]
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		review, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: attrs},
		}, metav1.CreateOptions{})
		if err == nil && review.Status.Allowed {
			return nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("denied: %s", review.Status.Reason)
			}
			return fmt.Errorf("user %s may not %s %s.%s in %s: %w", EdihubUser, attrs.Verb, attrs.Resource, attrs.Group, ns, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
