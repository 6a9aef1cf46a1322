package leasetest

import (
	"strings"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/bootstrap/leases"
)

// Check must catch each kind of violation, or the partition tests prove
// nothing.
func TestCheckCatchesViolations(t *testing.T) {
	t0 := time.Unix(100, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	good := func() *Recorder {
		r := NewRecorder()
		r.Granted(leases.Record{Region: "r", Holder: "A", LeaseID: 1, Granted: at(0), Expires: at(3)})
		r.Granted(leases.Record{Region: "r", Holder: "A", LeaseID: 1, Granted: at(0), Expires: at(5)})
		r.Granted(leases.Record{Region: "r", Holder: "B", LeaseID: 2, Granted: at(5), Expires: at(8)})
		r.Committed(Commit{Region: "r", Holder: "A", LeaseID: 1, At: at(4)})
		r.Committed(Commit{Region: "r", Holder: "B", LeaseID: 2, At: at(6)})
		return r
	}
	if err := good().Check(); err != nil {
		t.Fatalf("clean log rejected: %v", err)
	}
	for _, tc := range []struct {
		name string
		add  func(*Recorder)
		want string
	}{
		{"overlap", func(r *Recorder) {
			r.Granted(leases.Record{Region: "r", Holder: "C", LeaseID: 3, Granted: at(7), Expires: at(9)})
		}, "starts"},
		{"commit after expiry", func(r *Recorder) {
			r.Committed(Commit{Region: "r", Holder: "B", LeaseID: 2, At: at(9)})
		}, "outside"},
		{"commit under another's lease", func(r *Recorder) {
			r.Committed(Commit{Region: "r", Holder: "A", LeaseID: 2, At: at(6)})
		}, "of B"},
		{"never granted", func(r *Recorder) {
			r.Committed(Commit{Region: "r", Holder: "A", LeaseID: 9, At: at(6)})
		}, "never granted"},
		{"old lease commits later", func(r *Recorder) {
			r.Committed(Commit{Region: "r", Holder: "A", LeaseID: 1, At: at(5)})
		}, "after B committed"},
	} {
		r := good()
		tc.add(r)
		if err := r.Check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}
