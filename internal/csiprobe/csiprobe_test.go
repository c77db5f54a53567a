package csiprobe

import (
	"context"
	"errors"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

type fakeIdentity struct {
	csi.IdentityClient
	resp *csi.ProbeResponse
	err  error
}

func (f fakeIdentity) Probe(context.Context, *csi.ProbeRequest, ...grpc.CallOption) (*csi.ProbeResponse, error) {
	return f.resp, f.err
}

func TestReady(t *testing.T) {
	unavailable := errors.New("connection refused")
	for _, tc := range []struct {
		name    string
		id      fakeIdentity
		want    bool
		wantErr error
	}{
		{"ready unset means ready (CSI spec)", fakeIdentity{resp: &csi.ProbeResponse{}}, true, nil},
		{"ready true", fakeIdentity{resp: &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}}, true, nil},
		{"ready false", fakeIdentity{resp: &csi.ProbeResponse{Ready: wrapperspb.Bool(false)}}, false, nil},
		{"probe fails", fakeIdentity{err: unavailable}, false, unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Ready(context.Background(), tc.id)
			if got != tc.want || !errors.Is(err, tc.wantErr) {
				t.Errorf("Ready = %v, %v; want %v, %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
