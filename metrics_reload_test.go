package flashserve

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsCollectorRegistersOnceAcrossReloads: a second registration
// of the collector (a config reloaded into the same registry) is the
// AlreadyRegisteredError registerMetrics ignores, not another error, and
// a gather then serves every metric once, statacc_expired_total among
// them.
func TestMetricsCollectorRegistersOnceAcrossReloads(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(metricsCollector{}); err != nil {
		t.Fatal(err)
	}
	var are prometheus.AlreadyRegisteredError
	if err := reg.Register(metricsCollector{}); !errors.As(err, &are) {
		t.Fatalf("second registration: %v, want an AlreadyRegisteredError", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, mf := range mfs {
		if seen[mf.GetName()] {
			t.Errorf("%s gathered twice", mf.GetName())
		}
		seen[mf.GetName()] = true
	}
	if !seen[metricsNamespace+"statacc_expired_total"] {
		t.Errorf("no %sstatacc_expired_total among %d metrics", metricsNamespace, len(mfs))
	}
}
