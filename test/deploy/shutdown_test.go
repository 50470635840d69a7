package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/edihub/edihub/test/controlplane"
)

// flagDefaults returns the default of every EDIHUB_* setting from the
// settings reference docs/settings.md, which cmd/edihub generates from the
// flags (TestSettingsReference keeps it true).
func flagDefaults(t *testing.T) map[string]string {
	t.Helper()
	readme, err := os.ReadFile("../../docs/settings.md")
	if err != nil {
		t.Fatal(err)
	}
	defaults := map[string]string{}
	row := regexp.MustCompile("(?m)^\\| `(EDIHUB_[A-Z_]+)` \\| `-[a-z0-9-]+` \\| ([^|]+) \\|")
	for _, m := range row.FindAllStringSubmatch(string(readme), -1) {
		if _, seen := defaults[m[1]]; !seen {
			defaults[m[1]] = strings.Trim(strings.TrimSpace(m[2]), "`")
		}
	}
	return defaults
}

func manifestObjects(t *testing.T, file string) []runtime.Object {
	t.Helper()
	objs, err := controlplane.DecodeManifest(filepath.Join(base, file))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func deployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	for _, o := range manifestObjects(t, "deployment.yaml") {
		if d, ok := o.(*appsv1.Deployment); ok {
			return d
		}
	}
	t.Fatal("deployment.yaml has no Deployment")
	return nil
}

// TestGracePeriodCoversShutdown checks the Deployment's
// terminationGracePeriodSeconds against the shutdown sequence of
// `edihub serve` with the settings the Deployment passes (else the flags'
// defaults): stop the leader-gated workers (worker stop timeout), release the
// Lease (one request, bounded by half the renew deadline), keep serving
// (shutdown delay), drain HTTP (shutdown timeout). A shorter grace period
// lets the kubelet kill a replica mid-drain.
func TestGracePeriodCoversShutdown(t *testing.T) {
	defaults := flagDefaults(t)
	dep := deployment(t)
	c := dep.Spec.Template.Spec.Containers[0]
	setting := func(name string) time.Duration {
		v, ok := defaults[name]
		for _, e := range c.Env {
			if e.Name == name {
				v, ok = e.Value, true
			}
		}
		if !ok {
			t.Fatalf("no default for %s in docs/settings.md and none in deployment.yaml", name)
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s = %q: %v", name, v, err)
		}
		return d
	}
	stop := setting("EDIHUB_WORKER_STOP_TIMEOUT")
	release := setting("EDIHUB_RENEW_DEADLINE") / 2
	delay := setting("EDIHUB_SHUTDOWN_DELAY")
	drain := setting("EDIHUB_SHUTDOWN_TIMEOUT")
	need := stop + release + delay + drain
	if dep.Spec.Template.Spec.TerminationGracePeriodSeconds == nil {
		t.Fatal("deployment.yaml sets no terminationGracePeriodSeconds")
	}
	grace := time.Duration(*dep.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	t.Logf("shutdown: worker stop %v + lease release %v + delay %v + drain %v = %v; grace period %v", stop, release, delay, drain, need, grace)
	if need > grace {
		t.Errorf("terminationGracePeriodSeconds = %v, shorter than the shutdown it must cover (%v)", grace, need)
	}
	if delay == 0 {
		t.Errorf("EDIHUB_SHUTDOWN_DELAY = 0: endpoints would still send traffic to a replica that stopped listening")
	}
}

var taggedImage = regexp.MustCompile(`^[^:@]+(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})$`)

// TestImagesAreTagged keeps every container of the base on a tagged image
// of the name the overlay's images: entry replaces (edihub), never latest.
func TestImagesAreTagged(t *testing.T) {
	var containers []corev1.Container
	for _, file := range resources(t) {
		for _, o := range manifestObjects(t, file) {
			switch w := o.(type) {
			case *appsv1.Deployment:
				containers = append(containers, w.Spec.Template.Spec.Containers...)
				containers = append(containers, w.Spec.Template.Spec.InitContainers...)
			case *batchv1.Job:
				containers = append(containers, w.Spec.Template.Spec.Containers...)
			}
		}
	}
	if len(containers) < 2 {
		t.Fatalf("found %d containers, want the Deployment's and the migration Job's", len(containers))
	}
	for _, c := range containers {
		m := taggedImage.FindStringSubmatch(c.Image)
		switch {
		case m == nil:
			t.Errorf("container %s: image %q has no tag", c.Name, c.Image)
		case !strings.HasPrefix(c.Image, "edihub:"):
			t.Errorf("container %s: image %q, want edihub:<tag> (the overlay sets registry and tag)", c.Name, c.Image)
		case m[1] == ":latest":
			t.Errorf("container %s: image %q uses latest", c.Name, c.Image)
		}
	}
}

// TestMemoryLimitFitsTheInFlightBudget checks the Deployment's memory
// against the receiver's in-flight byte budget as `edihub serve` derives it
// (cmd/edihub inFlightLimit): the Go memory limit is 85% of the container's
// limit, the budget half of that but never below one largest message (its
// body and its decompression). The budget plus the process's own baseline
// must fit under the Go memory limit, or a burst of large messages admitted
// by the budget would push the replica into its OOM kill instead of 503s;
// and the request must not exceed the limit.
func TestMemoryLimitFitsTheInFlightBudget(t *testing.T) {
	defaults := flagDefaults(t)
	c := deployment(t).Spec.Template.Spec.Containers[0]
	setting := func(name string) int64 {
		v, ok := defaults[name]
		for _, e := range c.Env {
			if e.Name == name {
				v, ok = e.Value, true
			}
		}
		if !ok {
			t.Fatalf("no default for %s in docs/settings.md and none in deployment.yaml", name)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%s = %q: %v", name, v, err)
		}
		return n
	}
	limit, request := c.Resources.Limits.Memory(), c.Resources.Requests.Memory()
	if limit.IsZero() || request.IsZero() {
		t.Fatalf("deployment.yaml: memory request %v and limit %v must both be set", request, limit)
	}
	if request.Cmp(*limit) > 0 {
		t.Errorf("memory request %v above the limit %v", request, limit)
	}
	body := setting("EDIHUB_MAX_BODY_BYTES")
	decompressed := setting("EDIHUB_MAX_DECOMPRESSED_BYTES")
	if decompressed == 0 {
		decompressed = 4 * body
	}
	goLimit := limit.Value() * 85 / 100
	budget := setting("EDIHUB_MAX_IN_FLIGHT_BYTES")
	if budget == 0 {
		budget = max(goLimit/2, body+decompressed)
	}
	const baseline = 128 << 20 // the process without traffic: runtime, pools, caches
	t.Logf("memory limit %v: Go memory limit %d MiB, in-flight budget %d MiB, baseline %d MiB",
		limit, goLimit>>20, budget>>20, baseline>>20)
	if budget+baseline > goLimit {
		t.Errorf("in-flight budget %d MiB + baseline %d MiB exceed the Go memory limit %d MiB (85%% of %v): raise the memory limit or lower EDIHUB_MAX_BODY_BYTES / EDIHUB_MAX_DECOMPRESSED_BYTES / EDIHUB_MAX_IN_FLIGHT_BYTES",
			budget>>20, baseline>>20, goLimit>>20, limit)
	}
}
