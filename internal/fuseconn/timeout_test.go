package fuseconn

import (
	"testing"
	"time"
)

// TestEffectiveTimeout: the default applies, capped by the maximum, which also applies alone; never below the
// kernel's check period.
func TestEffectiveTimeout(t *testing.T) {
	for _, c := range []struct{ def, max, want time.Duration }{
		{0, 0, 0},
		{30 * time.Second, 0, 30 * time.Second},
		{0, time.Minute, time.Minute},
		{30 * time.Second, time.Minute, 30 * time.Second},
		{2 * time.Minute, time.Minute, time.Minute},
		{time.Second, 0, timeoutCheck},
		{0, 5 * time.Second, timeoutCheck},
	} {
		if got := effectiveTimeout(c.def, c.max); got != c.want {
			t.Errorf("default %s, max %s: %s, want %s", c.def, c.max, got, c.want)
		}
	}
	def, max, err := RequestTimeouts()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("default_request_timeout %s, max_request_timeout %s", def, max)
}
