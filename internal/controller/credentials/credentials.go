// Package credentials owns renewing the consumer's peering credentials: each
// credentials Secret holds a bound, expiring token of a ServiceAccount on the
// provider, and this reconciler requests a fresh one from the provider (with
// the current token) before the old one expires.
package credentials

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

// Remotes gives clients for peers.
type Remotes interface {
	Client(clusterID string) (client.Client, error)
}

// Reconciler renews credentials Secrets.
type Reconciler struct {
	// Client patches Secrets and reads ForeignClusters.
	Client client.Client
	// Secrets reads Secrets uncached: the agent caches only their metadata.
	Secrets  client.Reader
	Remotes  Remotes
	Clock    clock.Clock
	Recorder events.EventRecorder
	// RenewFraction: renew once this fraction of the token's lifetime has passed.
	RenewFraction float64
	// Retry is how soon to try again when the provider cannot be reached.
	Retry time.Duration
}

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;update;patch

// Reconcile renews the token in one credentials Secret when it is due.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	secret := &corev1.Secret{}
	if err := r.Secrets.Get(ctx, req.NamespacedName, secret); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	providerID := secret.Labels[corev1alpha1.LabelRemoteClusterID]
	saRef := secret.Annotations[corev1alpha1.AnnotationServiceAccount]
	saNS, saName, ok := strings.Cut(saRef, "/")
	if providerID == "" || !ok {
		return ctrl.Result{}, nil
	}
	kc := secret.Data[corev1alpha1.CredentialsKubeconfigKey]
	issued, expiry, err := tokenTimes(kc)
	if err != nil {
		r.Recorder.Eventf(secret, nil, corev1.EventTypeWarning, "InvalidCredentials", "Renew", "cannot read the token's lifetime: %v", err)
		return ctrl.Result{}, nil
	}
	now := r.Clock.Now()
	renewAt := issued.Add(time.Duration(float64(expiry.Sub(issued)) * r.RenewFraction))
	if now.Before(renewAt) {
		return ctrl.Result{RequeueAfter: renewAt.Sub(now)}, nil
	}
	fc := &corev1alpha1.ForeignCluster{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: providerID}, fc); err == nil && fc.Spec.Unreachable {
		return ctrl.Result{}, nil // forcibly unpeered: never call the provider again
	}
	remote, err := r.Remotes.Client(providerID)
	if err != nil {
		log.V(1).Info("provider not reachable; token renewal postponed", "provider", providerID, "reason", err.Error())
		return ctrl.Result{RequeueAfter: r.Retry}, nil
	}
	lifetime := int64(expiry.Sub(issued).Round(time.Second).Seconds())
	sa := &corev1.ServiceAccount{}
	sa.Namespace, sa.Name = saNS, saName
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &lifetime}}
	if err := remote.SubResource("token").Create(ctx, sa, tr); err != nil {
		if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) {
			r.Recorder.Eventf(secret, nil, corev1.EventTypeWarning, "RenewalRejected", "Renew", "provider %s rejected the token renewal: %v", providerID, err)
		}
		return ctrl.Result{RequeueAfter: r.Retry}, fmt.Errorf("renew token on %s: %w", providerID, err)
	}
	newKC, err := replaceToken(kc, tr.Status.Token)
	if err != nil {
		return ctrl.Result{}, err
	}
	patch := client.MergeFrom(secret.DeepCopy())
	secret.Data[corev1alpha1.CredentialsKubeconfigKey] = newKC
	secret.Annotations[corev1alpha1.AnnotationTokenExpiry] = tr.Status.ExpirationTimestamp.UTC().Format(time.RFC3339)
	if err := r.Client.Patch(ctx, secret, patch); err != nil {
		return ctrl.Result{}, err
	}
	log.Info("renewed the token for a provider", "provider", providerID, "expires", tr.Status.ExpirationTimestamp.Time)
	r.Recorder.Eventf(secret, nil, corev1.EventTypeNormal, "TokenRenewed", "Renew", "renewed the token for provider %s; it expires at %s", providerID, tr.Status.ExpirationTimestamp.UTC().Format(time.RFC3339))
	// The patch triggers the next reconcile, which schedules the next renewal.
	return ctrl.Result{}, nil
}

// SetupWithManager watches Annex credentials Secrets (metadata only).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Secrets == nil {
		r.Secrets = mgr.GetAPIReader()
	}
	isCredentials := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetName() == corev1alpha1.CredentialsSecretName && o.GetLabels()[corev1alpha1.LabelManagedBy] == corev1alpha1.ManagedByAnnex
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("credentials").
		For(&corev1.Secret{}, builder.OnlyMetadata, builder.WithPredicates(isCredentials)).
		Complete(r)
}

// tokenTimes returns the issued-at and expiry of the bearer token in a kubeconfig.
func tokenTimes(kubeconfig []byte) (time.Time, time.Time, error) {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	var token string
	for _, ai := range cfg.AuthInfos {
		token = ai.Token
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, time.Time{}, errors.New("the kubeconfig holds no JWT bearer token")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("token payload: %w", err)
	}
	var claims struct {
		IAT int64 `json:"iat"`
		EXP int64 `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("token claims: %w", err)
	}
	if claims.EXP == 0 || claims.IAT == 0 || claims.EXP <= claims.IAT {
		return time.Time{}, time.Time{}, errors.New("the token has no usable iat/exp claims")
	}
	return time.Unix(claims.IAT, 0), time.Unix(claims.EXP, 0), nil
}

// replaceToken swaps the bearer token of every user in a kubeconfig.
func replaceToken(kubeconfig []byte, token string) ([]byte, error) {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, err
	}
	for _, ai := range cfg.AuthInfos {
		ai.Token = token
	}
	return clientcmd.Write(*cfg)
}
