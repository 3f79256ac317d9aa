// SPDX-License-Identifier: Apache-2.0
//
// The lab's VLAN host: a tc program on a host's interface that makes it a station of one
// VLAN (or one QinQ service) behind a switch, on kernels without 802.1Q devices. Egress
// pushes the tags; ingress takes frames of exactly those tags and pops them, and drops
// every other frame (an access port delivers only its VLAN).
//
// Built by build.rs once per tag stack and direction:
//   OUTER_TPID, OUTER_VID: the outer tag; INNER_VID: the inner 802.1Q tag, 0 for none;
//   INGRESS: 1 for the receive side.
// The kernel keeps the outer tag in packet metadata on both sides (it untags on receive
// before tc runs; a pushed tag stays metadata until a device without VLAN offload sends
// it), and bpf_skb_vlan_push/pop move the inner one between metadata and the frame.

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Apache-2.0";

#if INGRESS
SEC("tc")
int vlan_host(struct __sk_buff *skb)
{
	if (!skb->vlan_present || (skb->vlan_tci & 0x0fff) != OUTER_VID ||
	    skb->vlan_proto != bpf_htons(OUTER_TPID))
		return TC_ACT_SHOT;
	if (bpf_skb_vlan_pop(skb))
		return TC_ACT_SHOT;
	if (INNER_VID) {
		if (!skb->vlan_present || (skb->vlan_tci & 0x0fff) != INNER_VID ||
		    skb->vlan_proto != bpf_htons(0x8100))
			return TC_ACT_SHOT;
		if (bpf_skb_vlan_pop(skb))
			return TC_ACT_SHOT;
	}
	if (skb->vlan_present)
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}
#else
SEC("tc")
int vlan_host(struct __sk_buff *skb)
{
	if (INNER_VID && bpf_skb_vlan_push(skb, bpf_htons(0x8100), INNER_VID))
		return TC_ACT_SHOT;
	if (bpf_skb_vlan_push(skb, bpf_htons(OUTER_TPID), OUTER_VID))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}
#endif
