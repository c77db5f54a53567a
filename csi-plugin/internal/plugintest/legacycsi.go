package plugintest

import (
	"context"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// legacyCSI is the part of CSI spec v1.12.0's csi.proto (package csi.v1) that kubelet ≤ v1.36 reads volume health
// from, field for field: NodeGetVolumeStatsResponse {usage = 1; volume_condition = 2}, VolumeUsage, VolumeCondition
// {abnormal = 1; message = 2} and NodeServiceCapability.RPC.Type with VOLUME_CONDITION = 4. Spec v1.13 removed
// the condition; a test decodes the plugin's answers with this schema to see them as such a kubelet does.
const legacyCSI = `
name: "csi_v1_12_subset.proto" package: "csi.v1" syntax: "proto3"
message_type {
  name: "NodeGetVolumeStatsResponse"
  field { name: "usage" number: 1 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".csi.v1.VolumeUsage" json_name: "usage" }
  field { name: "volume_condition" number: 2 label: LABEL_OPTIONAL type: TYPE_MESSAGE type_name: ".csi.v1.VolumeCondition" json_name: "volumeCondition" }
}
message_type {
  name: "VolumeUsage"
  field { name: "available" number: 1 label: LABEL_OPTIONAL type: TYPE_INT64 json_name: "available" }
  field { name: "total" number: 2 label: LABEL_OPTIONAL type: TYPE_INT64 json_name: "total" }
  field { name: "used" number: 3 label: LABEL_OPTIONAL type: TYPE_INT64 json_name: "used" }
  field { name: "unit" number: 4 label: LABEL_OPTIONAL type: TYPE_ENUM type_name: ".csi.v1.VolumeUsage.Unit" json_name: "unit" }
  enum_type { name: "Unit" value { name: "UNKNOWN" number: 0 } value { name: "BYTES" number: 1 } value { name: "INODES" number: 2 } }
}
message_type {
  name: "VolumeCondition"
  field { name: "abnormal" number: 1 label: LABEL_OPTIONAL type: TYPE_BOOL json_name: "abnormal" }
  field { name: "message" number: 2 label: LABEL_OPTIONAL type: TYPE_STRING json_name: "message" }
}
message_type {
  name: "NodeGetCapabilitiesResponse"
  field { name: "capabilities" number: 1 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".csi.v1.NodeServiceCapability" json_name: "capabilities" }
}
message_type {
  name: "NodeServiceCapability"
  field { name: "rpc" number: 1 label: LABEL_OPTIONAL type: TYPE_MESSAGE type_name: ".csi.v1.NodeServiceCapability.RPC" oneof_index: 0 json_name: "rpc" }
  nested_type {
    name: "RPC"
    field { name: "type" number: 1 label: LABEL_OPTIONAL type: TYPE_ENUM type_name: ".csi.v1.NodeServiceCapability.RPC.Type" json_name: "type" }
    enum_type {
      name: "Type"
      value { name: "UNKNOWN" number: 0 } value { name: "STAGE_UNSTAGE_VOLUME" number: 1 }
      value { name: "GET_VOLUME_STATS" number: 2 } value { name: "EXPAND_VOLUME" number: 3 }
      value { name: "VOLUME_CONDITION" number: 4 } value { name: "SINGLE_NODE_MULTI_WRITER" number: 5 }
      value { name: "VOLUME_MOUNT_GROUP" number: 6 }
    }
  }
  oneof_decl { name: "type" }
}
`

// LegacyMessage returns an empty message of spec v1.12's csi.v1 schema above, by name (such as
// "NodeGetVolumeStatsResponse"): what a kubelet built on that spec decodes the plugin's answers into.
func LegacyMessage(name string) (*dynamicpb.Message, error) {
	var fdp descriptorpb.FileDescriptorProto
	if err := prototext.Unmarshal([]byte(legacyCSI), &fdp); err != nil {
		return nil, fmt.Errorf("legacy csi.proto subset: %w", err)
	}
	fd, err := protodesc.NewFile(&fdp, nil)
	if err != nil {
		return nil, fmt.Errorf("legacy csi.proto subset: %w", err)
	}
	md := fd.Messages().ByName(protoreflect.Name(name))
	if md == nil {
		return nil, fmt.Errorf("no message %s in the legacy csi.proto subset", name)
	}
	return dynamicpb.NewMessage(md), nil
}

// LegacyVolumeHealth asks the plugin on conn what kubelet ≤ v1.36 with the CSIVolumeHealth gate asks it, decoding
// the answers with spec v1.12's schema: NodeGetCapabilities, and when it lists VOLUME_CONDITION, the condition
// of NodeGetVolumeStats for volume vol at path (k8s.io/kubernetes v1.36 pkg/volume/csi/csi_client.go,
// NodeGetVolumeStats and nodeSupportsVolumeCondition). supported is false when the capability is not listed.
func LegacyVolumeHealth(ctx context.Context, conn grpc.ClientConnInterface, req *csi.NodeGetVolumeStatsRequest) (supported, abnormal bool, message string, err error) {
	caps, err := LegacyMessage("NodeGetCapabilitiesResponse")
	if err != nil {
		return false, false, "", err
	}
	if err := conn.Invoke(ctx, "/csi.v1.Node/NodeGetCapabilities", &csi.NodeGetCapabilitiesRequest{}, caps); err != nil {
		return false, false, "", err
	}
	list := caps.Get(caps.Descriptor().Fields().ByName("capabilities")).List()
	for i := 0; i < list.Len(); i++ {
		rpc := list.Get(i).Message().Get(list.Get(i).Message().Descriptor().Fields().ByName("rpc")).Message()
		typ := rpc.Descriptor().Fields().ByName("type")
		if v := typ.Enum().Values().ByNumber(rpc.Get(typ).Enum()); v != nil && v.Name() == "VOLUME_CONDITION" {
			supported = true
		}
	}
	if !supported {
		return false, false, "", nil
	}
	stats, err := LegacyMessage("NodeGetVolumeStatsResponse")
	if err != nil {
		return true, false, "", err
	}
	if err := conn.Invoke(ctx, "/csi.v1.Node/NodeGetVolumeStats", req, stats); err != nil {
		return true, false, "", err
	}
	cond := stats.Get(stats.Descriptor().Fields().ByName("volume_condition")).Message()
	return true, cond.Get(cond.Descriptor().Fields().ByName("abnormal")).Bool(), cond.Get(cond.Descriptor().Fields().ByName("message")).String(), nil
}
