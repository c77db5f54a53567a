package report

import (
	"reflect"
	"testing"
)

// TestProfileOutcomes: a driver-agnostic profile becomes the matrix's I/O outcomes: an error with its time and
// recovery, no error with its stall, and the direct read (no matrix column) left out.
func TestProfileOutcomes(t *testing.T) {
	p := &Profile{IO: []IOProfile{
		{Kind: IOKeptFD, Failed: true, FirstErrno: "ENOTCONN", ToFirstError: 0.8, Recovered: true, ToGoodRead: 2.5, Stall: 1700},
		{Kind: IONewOpen, Failed: true, FirstErrno: "ENOTCONN", ToFirstError: 0.9, Stall: 40000},
		{Kind: "direct-read", Failed: true, FirstErrno: "ENOTCONN"},
		{Kind: IOStat, Stall: 0},
	}}
	want := []IOOutcome{
		{Kind: IOKeptFD, FirstError: "ENOTCONN", KillToFirstError: 0.8, KillToGood: 2.5, Stall: 1700},
		{Kind: IONewOpen, FirstError: "ENOTCONN", KillToFirstError: 0.9, Stall: 40000},
		{Kind: IOStat},
	}
	if got := p.Outcomes(); !reflect.DeepEqual(got, want) {
		t.Errorf("Outcomes() = %+v, want %+v", got, want)
	}
}
