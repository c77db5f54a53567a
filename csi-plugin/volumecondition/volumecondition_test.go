package volumecondition_test

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
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
