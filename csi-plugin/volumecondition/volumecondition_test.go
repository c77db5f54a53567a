package volumecondition_test

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/internal/plugintest"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/volumecondition"
)

// TestOlderReaderDecodesTheCondition marshals a response as the plugin sends it and decodes it with CSI spec
// v1.12's schema, as kubelet ≤ v1.36 does: the usage and the condition both arrive.
func TestOlderReaderDecodesTheCondition(t *testing.T) {
	for _, c := range []volumecondition.Condition{
		{Abnormal: true, Message: "FUSE mount of volume v is not answering: transport endpoint is not connected"},
		{Message: "FUSE mount answers"},
		{Abnormal: true},
		{Abnormal: true, Message: "bad \xff path"},
	} {
		resp := &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: 4096, Used: 1024}}}
		volumecondition.Set(resp, c)
		b, err := proto.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		old, err := plugintest.LegacyMessage("NodeGetVolumeStatsResponse")
		if err != nil {
			t.Fatal(err)
		}
		if err := proto.Unmarshal(b, old); err != nil {
			t.Fatalf("spec v1.12 decode of %+v: %v", c, err)
		}
		fields := old.Descriptor().Fields()
		if n := len(old.GetUnknown()); n != 0 {
			t.Errorf("%+v: %d bytes unknown to a spec v1.12 reader", c, n)
		}
		usage := old.Get(fields.ByName("usage")).List()
		if usage.Len() != 1 || usage.Get(0).Message().Get(usage.Get(0).Message().Descriptor().Fields().ByName("total")).Int() != 4096 {
			t.Errorf("%+v: usage %v", c, usage)
		}
		if !old.Has(fields.ByName("volume_condition")) {
			t.Fatalf("%+v: no volume_condition for a spec v1.12 reader", c)
		}
		cond := old.Get(fields.ByName("volume_condition")).Message()
		abnormal := cond.Get(cond.Descriptor().Fields().ByName("abnormal")).Bool()
		msg := cond.Get(cond.Descriptor().Fields().ByName("message")).String()
		want := c.Message
		if want == "bad \xff path" {
			want = "bad \uFFFD path"
		}
		if abnormal != c.Abnormal || msg != want {
			t.Errorf("spec v1.12 reader got abnormal %v %q, want %v %q", abnormal, msg, c.Abnormal, want)
		}

		// And back through the v1.13 types, as the plugin's own tests read it.
		var again csi.NodeGetVolumeStatsResponse
		if err := proto.Unmarshal(b, &again); err != nil {
			t.Fatal(err)
		}
		if got, ok := volumecondition.Get(&again); !ok || got.Abnormal != c.Abnormal || got.Message != want {
			t.Errorf("Get = %+v, %v; want %+v", got, ok, c)
		}
	}
}

func TestGetWithoutCondition(t *testing.T) {
	if c, ok := volumecondition.Get(&csi.NodeGetVolumeStatsResponse{}); ok || c != (volumecondition.Condition{}) {
		t.Errorf("Get on a response without a condition: %+v, %v", c, ok)
	}
	resp := &csi.NodeGetVolumeStatsResponse{}
	resp.ProtoReflect().SetUnknown([]byte{0x12, 0x05, 0x08}) // field 2 claims 5 bytes, has 1
	if _, ok := volumecondition.Get(resp); ok {
		t.Error("Get accepted a truncated condition")
	}
}

func TestCapabilityIsVolumeCondition(t *testing.T) {
	caps, err := plugintest.LegacyMessage("NodeServiceCapability")
	if err != nil {
		t.Fatal(err)
	}
	rpc := caps.Descriptor().Fields().ByName("rpc").Message()
	v := rpc.Fields().ByName("type").Enum().Values().ByNumber(volumecondition.Capability.Number())
	if v == nil || v.Name() != "VOLUME_CONDITION" {
		t.Fatalf("capability %d is %v in spec v1.12, want VOLUME_CONDITION", volumecondition.Capability, v)
	}
}

// entry is a health condition for the Fold tests.
type entry struct{ status, reason, message string }

func foldEntries(in []*entry) []*entry {
	return volumecondition.Fold(in, "of the volume's mounts",
		func(e *entry) string { return e.status + "/" + e.reason },
		func(e *entry) *string { return &e.message })
}

// checkStorable fails t unless out is what kubelet v1.37 can store for one volume: no two conditions with the
// same status and reason, at most MaxEntries, valid UTF-8 messages; and unless out keeps the first condition of
// each of the first MaxEntries keys of in, in their order.
func checkStorable(t *testing.T, in, out []*entry) {
	t.Helper()
	var want []string
	seen := map[string]bool{}
	for _, e := range in {
		if k := e.status + "/" + e.reason; !seen[k] {
			seen[k] = true
			want = append(want, k)
		}
	}
	if len(want) > volumecondition.MaxEntries {
		want = want[:volumecondition.MaxEntries]
	}
	if len(out) != len(want) {
		t.Fatalf("%d conditions out of %d with %d keys, want %d", len(out), len(in), len(seen), len(want))
	}
	keys := map[string]bool{}
	for i, e := range out {
		k := e.status + "/" + e.reason
		if keys[k] {
			t.Fatalf("duplicate condition (status, reason) %s", k)
		}
		keys[k] = true
		if k != want[i] {
			t.Fatalf("condition %d is %s, want %s", i, k, want[i])
		}
		if !utf8.ValidString(e.message) {
			t.Fatalf("condition %s: message %q is not valid UTF-8", k, e.message)
		}
	}
}

func TestFold(t *testing.T) {
	many := func(n int) []*entry {
		var out []*entry
		for i := 0; i < n; i++ {
			out = append(out, &entry{"Inaccessible", fmt.Sprintf("Reason%d", i), "m"})
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		in      []*entry
		msgs    []string // the messages out, nil: not checked
		dropped bool     // more than MaxEntries keys: the last kept condition must say so
	}{
		{"none", nil, nil, false},
		{"one", []*entry{{"Inaccessible", "FuseServerGone", "gone"}}, []string{"gone"}, false},
		{"a reason repeated", []*entry{
			{"Inaccessible", "FuseServerGone", "staging gone"},
			{"Inaccessible", "NotMounted", "nothing at x\xff"},
			{"Inaccessible", "FuseServerGone", "target gone"},
			{"Inaccessible", "FuseServerGone", "other target gone"},
		}, []string{"staging gone (same for 2 more of the volume's mounts)", "nothing at x\uFFFD"}, false},
		{"same reason, another status", []*entry{{"Inaccessible", "R", "a"}, {"Degraded", "R", "b"}}, []string{"a", "b"}, false},
		{"sixteen reasons", many(16), nil, false},
		{"seventeen reasons", many(17), nil, true},
		{"forty reasons", append(many(40), many(40)...), nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var copies []*entry
			for _, e := range tc.in {
				c := *e
				copies = append(copies, &c)
			}
			out := foldEntries(copies)
			checkStorable(t, tc.in, out)
			for i, m := range tc.msgs {
				if out[i].message != m {
					t.Errorf("message %d: %q, want %q", i, out[i].message, m)
				}
			}
			if said := len(out) > 0 && strings.Contains(out[len(out)-1].message, "more conditions not shown"); said != tc.dropped {
				t.Errorf("the last condition kept says others were dropped: %v, want %v (%q)", said, tc.dropped, out[len(out)-1].message)
			}
		})
	}
}

// FuzzFold: whatever a plugin's checks produce, the folded conditions are storable.
func FuzzFold(f *testing.F) {
	f.Add([]byte{0, 0, 1, 2, 0})
	f.Add([]byte("0123456789abcdefghijklmnopqrstuvwxyz"))
	f.Add([]byte{0xff, 0xfe, 0x80, 7, 7, 7})
	f.Fuzz(func(t *testing.T, b []byte) {
		var in []*entry
		for i, c := range b { // each byte one condition: 3 statuses × 20 reasons, a message that may be bad UTF-8
			in = append(in, &entry{fmt.Sprint(c % 3), fmt.Sprint(c / 3 % 20), string(b[i:min(len(b), i+3)])})
		}
		checkStorable(t, in, foldEntries(in))
	})
}

// TestSetWritesOneCondition: setting a condition twice leaves one on the wire (kubelet ≤ v1.36 reads one per
// response; a second field 2 would be merged into it).
func TestSetWritesOneCondition(t *testing.T) {
	resp := &csi.NodeGetVolumeStatsResponse{}
	volumecondition.Set(resp, volumecondition.Condition{Abnormal: true, Message: "first"})
	volumecondition.Set(resp, volumecondition.Condition{Abnormal: true, Message: "second"})
	n := 0
	for b := resp.ProtoReflect().GetUnknown(); len(b) > 0; {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			t.Fatal("bad tag")
		}
		b = b[l:]
		if num == volumecondition.Field {
			n++
		}
		if l = protowire.ConsumeFieldValue(num, typ, b); l < 0 {
			t.Fatal("bad field")
		}
		b = b[l:]
	}
	if c, ok := volumecondition.Get(resp); n != 1 || !ok || c.Message != "second" {
		t.Fatalf("%d conditions on the wire, Get = %+v, %v; want one, the second", n, c, ok)
	}
}
