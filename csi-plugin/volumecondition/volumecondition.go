// Package volumecondition shapes the volume conditions kubelet reads: it writes and reads the VolumeCondition of
// NodeGetVolumeStatsResponse as CSI spec ≤ v1.12 defined it, on a plugin built on spec v1.13, which removed it;
// and it folds the health entries of spec v1.13 into what kubelet v1.37 can store (Fold).
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
	"fmt"
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

// MaxEntries is the most health conditions one volume may carry. kubelet v1.37 copies a volume's
// NodeGetVolumeHealth entries as they are into pod.status.volumeHealth[].healthConditions, a list the API server
// keys by status and reason and caps at 16 items; a status patch with a duplicate or a 17th condition is
// refused (422), and since kubelet retries it before it checks whether the pod can be deleted, the pod hangs in
// Terminating (kubernetes#142280, open; kubelet PR 142292, open, would deduplicate on its side). So the
// plugin folds its entries before it answers.
const MaxEntries = 16

// Fold returns entries with at most one entry per key (a condition's status and reason) and at most MaxEntries
// entries, every message valid UTF-8. Of entries with the same key the first is kept, its message saying how many
// more there were ("same for N more " + what); entries beyond MaxEntries are dropped and the last kept one says
// how many. msg gives access to an entry's message. Fold changes the messages of entries in place.
func Fold[E any](entries []E, what string, key func(E) string, msg func(E) *string) []E {
	var out []E
	more := map[string]int{}
	dropped := 0
	for _, e := range entries {
		k := key(e)
		if _, seen := more[k]; seen {
			more[k]++
			continue
		}
		if len(out) == MaxEntries {
			dropped++
			continue
		}
		more[k] = 0
		out = append(out, e)
	}
	for _, e := range out {
		m := msg(e)
		if n := more[key(e)]; n > 0 {
			*m = fmt.Sprintf("%s (same for %d more %s)", *m, n, what)
		}
		*m = strings.ToValidUTF8(*m, "\uFFFD")
	}
	if dropped > 0 {
		m := msg(out[len(out)-1])
		*m = fmt.Sprintf("%s (and %d more conditions not shown: at most %d fit)", *m, dropped, MaxEntries)
	}
	return out
}
