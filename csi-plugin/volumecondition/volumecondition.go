// Package volumecondition writes and reads the VolumeCondition of NodeGetVolumeStatsResponse as CSI spec ≤ v1.12
// defined it, on a plugin built on spec v1.13, which removed it.
//
// kubelet up to v1.36 (spec ≤ v1.12 in its go.mod) reads volume health only from there: with the CSIVolumeHealth
// gate and the node capability VOLUME_CONDITION it takes VolumeCondition from NodeGetVolumeStats and turns an
// abnormal one into a Warning event VolumeConditionAbnormal on the pod (k8s.io/kubernetes v1.36
// pkg/volume/csi/csi_client.go NodeGetVolumeStats, pkg/kubelet/server/stats/volume_stat_calculator.go). Spec v1.13
// reserved both numbers (csi.proto: "reserved 2" in NodeGetVolumeStatsResponse, "reserved 4" in
// NodeServiceCapability.RPC.Type), so writing them never clashes with a newer field: a v1.13 reader skips field 2
// as unknown, an older reader decodes it as it always did.
package volumecondition

import (
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protowire"
)

// Capability is the node capability VOLUME_CONDITION of spec ≤ v1.12 (value 4, reserved since v1.13).
const Capability = csi.NodeServiceCapability_RPC_Type(4)

// Field is the number of NodeGetVolumeStatsResponse.volume_condition in spec ≤ v1.12 (reserved since v1.13).
const Field protowire.Number = 2

// Fields of the spec ≤ v1.12 message VolumeCondition.
const (
	abnormalField protowire.Number = 1 // bool abnormal
	messageField  protowire.Number = 2 // string message
)

// Condition is spec ≤ v1.12's VolumeCondition.
type Condition struct {
	Abnormal bool
	Message  string
}

// Set writes c into resp as field 2, replacing whatever unknown fields resp had. The message is made valid
// UTF-8 (a proto3 string that is not fails the reader's whole decode, losing the usage too).
func Set(resp *csi.NodeGetVolumeStatsResponse, c Condition) {
	var m []byte
	if c.Abnormal {
		m = protowire.AppendTag(m, abnormalField, protowire.VarintType)
		m = protowire.AppendVarint(m, 1)
	}
	if c.Message != "" {
		m = protowire.AppendTag(m, messageField, protowire.BytesType)
		m = protowire.AppendString(m, strings.ToValidUTF8(c.Message, "\uFFFD"))
	}
	b := protowire.AppendTag(nil, Field, protowire.BytesType)
	b = protowire.AppendBytes(b, m)
	resp.ProtoReflect().SetUnknown(b)
}

// Get reads the condition back from resp's unknown fields, as a spec ≤ v1.12 reader would (a message field seen
// twice is merged, later values win). ok is false when resp carries none or it does not parse.
func Get(resp *csi.NodeGetVolumeStatsResponse) (c Condition, ok bool) {
	b := resp.ProtoReflect().GetUnknown()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return Condition{}, false
		}
		b = b[n:]
		if num != Field || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return Condition{}, false
			}
			b = b[n:]
			continue
		}
		m, n := protowire.ConsumeBytes(b)
		if n < 0 || !merge(&c, m) {
			return Condition{}, false
		}
		b = b[n:]
		ok = true
	}
	return c, ok
}

func merge(c *Condition, m []byte) bool {
	for len(m) > 0 {
		num, typ, n := protowire.ConsumeTag(m)
		if n < 0 {
			return false
		}
		m = m[n:]
		switch {
		case num == abnormalField && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(m)
			if n < 0 {
				return false
			}
			c.Abnormal, m = v != 0, m[n:]
		case num == messageField && typ == protowire.BytesType:
			s, n := protowire.ConsumeString(m)
			if n < 0 {
				return false
			}
			c.Message, m = s, m[n:]
		default:
			if n = protowire.ConsumeFieldValue(num, typ, m); n < 0 {
				return false
			}
			m = m[n:]
		}
	}
	return true
}
