// SPDX-License-Identifier: Apache-2.0
//
// Ferrouter's XDP program for AF_XDP ports: everything the fast path forwards is
// redirected to the port's AF_XDP socket; everything the Linux stack must see (ARP and
// other non-IP protocols, link-layer and IP multicast/broadcast, link-local, the router's
// own addresses and its subnets' directed broadcasts) is passed to the kernel unchanged.
//
// Every access is preceded by a bounds check against data_end; a frame too short for the
// header being read is passed, so the kernel counts its own errors.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

// Ferrouter's licence. Not GPL-compatible, so the kernel refuses GPL-only helpers: the
// two used here (map lookup, redirect_map) are not.
char LICENSE[] SEC("license") = "Apache-2.0";

// One AF_XDP socket per receive queue, keyed by queue index.
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

// An address: IPv6 as is, IPv4 as ::ffff:a.b.c.d.
struct addr {
	__u32 w[4];
};

// The router's own addresses, filled by userspace: traffic to them goes to the kernel.
// The value is a set of bits: LOCAL (always), LOCAL_NAT: NAT shares the address
// (masquerade, a port forward), and traffic to a port NAT claims in nat_ports goes to the
// fast path instead; LOCAL_ESP: IPsec tunnels end on it, and ESP to it goes to the fast
// path.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct addr);
	__type(value, __u8);
} local_addrs SEC(".maps");

#define LOCAL_NAT 2
#define LOCAL_ESP 4
#define LOCAL_NATT 8
#define NATT_PORT 4500

// Whether the UDP header at `l4` goes to port 4500 (NAT-T).
static __always_inline int natt_packet(__u8 *l4, void *end)
{
	if ((void *)(l4 + 8) > end)
		return 0;
	if (((l4[2] << 8) | l4[3]) != NATT_PORT)
		return 0;
	// ESP in UDP, or a keepalive (one 0xff byte): the fast path's. IKE behind the
	// non-ESP marker (four zero bytes, RFC 3948 section 2.2) is the IKE daemon's, in the
	// kernel (an ESP SPI is never 0).
	if ((void *)(l4 + 12) > end)
		return 1;
	return (l4[8] | l4[9] | l4[10] | l4[11]) != 0;
}

// Ports of the router's own addresses that NAT claims from the kernel: a bitmap per
// block of 1024 64-bit words (64-bit: an array map lays its values out 8 bytes apart,
// which is what userspace sees through mmap), blocks 0-2 the ports of NAT's mappings (TCP, UDP, ICMP echo
// identifiers), written by the workers as they map and unmap, blocks 3-5 those of its
// port forwards, written by the control thread. Userspace writes it through mmap.
#define NAT_BLOCK_WORDS 1024
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 6 * NAT_BLOCK_WORDS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} nat_ports SEC(".maps");

// Whether NAT claims `port` (host order) of protocol block `block` (0 TCP, 1 UDP, 2 ICMP),
// as a mapping's or as a port forward's (`first` 1: as a port forward's only).
static __always_inline int nat_claims(__u32 block, __u32 port, int first)
{
	__u32 bit = port & 63;
	__u32 word = (port & 0xffff) >> 6;
	__u32 idx = block * NAT_BLOCK_WORDS + word;
	__u64 *w;
	if (!first) {
		w = bpf_map_lookup_elem(&nat_ports, &idx);
		if (w && (*w >> bit) & 1)
			return 1;
	}
	idx += 3 * NAT_BLOCK_WORDS;
	w = bpf_map_lookup_elem(&nat_ports, &idx);
	return w && (*w >> bit) & 1;
}

// Whether an IPv4 packet to a NAT-shared address belongs to NAT: TCP or UDP to a claimed
// port, an echo reply to a claimed identifier, an ICMP error quoting a packet NAT sent
// (from a claimed port or identifier). Later fragments (no ports) stay the kernel's.
static __always_inline int nat_packet(struct iphdr *ip, void *end)
{
	if (ip->frag_off & bpf_htons(0x1fff))
		return 0;
	__u32 ihl = (ip->ihl & 0xf) * 4;
	if (ihl < 20)
		return 0;
	__u8 *l4 = (__u8 *)ip + ihl;
	if ((void *)(l4 + 8) > end)
		return 0;
	if (ip->protocol == IPPROTO_TCP || ip->protocol == IPPROTO_UDP)
		return nat_claims(ip->protocol == IPPROTO_TCP ? 0 : 1, (l4[2] << 8) | l4[3], 0);
	if (ip->protocol != IPPROTO_ICMP)
		return 0;
	__u8 type = l4[0];
	// An echo reply to a mapping's identifier; an echo request only to a forward.
	if (type == 0 || type == 8)
		return nat_claims(2, (l4[4] << 8) | l4[5], type == 8);
	if (type != 3 && type != 4 && type != 5 && type != 11 && type != 12)
		return 0;
	struct iphdr *in = (struct iphdr *)(l4 + 8);
	if ((void *)(in + 1) > end)
		return 0;
	__u32 iihl = (in->ihl & 0xf) * 4;
	if (iihl < 20)
		return 0;
	__u8 *il4 = (__u8 *)in + iihl;
	if ((void *)(il4 + 8) > end)
		return 0;
	if (in->protocol == IPPROTO_TCP || in->protocol == IPPROTO_UDP)
		return nat_claims(in->protocol == IPPROTO_TCP ? 0 : 1, (il4[0] << 8) | il4[1], 0);
	if (in->protocol == IPPROTO_ICMP && (il4[0] == 8 || il4[0] == 0))
		return nat_claims(2, (il4[4] << 8) | il4[5], 0);
	return 0;
}

struct vlan {
	__be16 tci;
	__be16 proto;
};

/* "xdp.frags": the program handles multi-buffer frames (BPF_F_XDP_HAS_FRAGS), so it
 * may run on interfaces with an MTU above a page (jumbo frames: veth refuses other
 * programs there). It reads headers only, which are in the first buffer; the socket is
 * bound with XDP_USE_SG and gets such frames as several descriptors. */
SEC("xdp.frags")
int ferrouter_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct addr key = {};
	__be16 proto;
	void *l3;
	__u8 nexthdr = 0;

	if ((void *)(eth + 1) > end)
		return XDP_PASS;
	// Link-layer broadcast and multicast (ARP, subnet broadcasts, control protocols): the
	// kernel's, and never forwarded (RFC 1812 5.3.4).
	if (eth->h_dest[0] & 1)
		return XDP_PASS;
	proto = eth->h_proto;
	l3 = eth + 1;

	// Up to two tags (802.1Q, or 802.1ad outer + 802.1Q inner).
#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		struct vlan *tag = l3;
		if ((void *)(tag + 1) > end)
			return XDP_PASS;
		proto = tag->proto;
		l3 = tag + 1;
	}

	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = l3;
		if ((void *)(ip + 1) > end)
			return XDP_PASS;
		__u32 dst = bpf_ntohl(ip->daddr);
		if ((dst & 0xf0000000) == 0xe0000000 || // 224.0.0.0/4 multicast
		    dst == 0xffffffff ||                // limited broadcast
		    (dst & 0xffff0000) == 0xa9fe0000)   // 169.254.0.0/16 link-local
			return XDP_PASS;
		key.w[2] = bpf_htonl(0xffff);
		key.w[3] = ip->daddr;
		__u8 *kind = bpf_map_lookup_elem(&local_addrs, &key);
		if (kind) {
			if ((*kind & LOCAL_NAT) && nat_packet(ip, end))
				return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
			if ((*kind & LOCAL_ESP) && ip->protocol == IPPROTO_ESP)
				return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
			if ((*kind & LOCAL_NATT) && ip->protocol == IPPROTO_UDP &&
			    !(ip->frag_off & bpf_htons(0x1fff))) {
				__u32 ihl = (ip->ihl & 0xf) * 4;
				if (ihl >= 20 && natt_packet((__u8 *)ip + ihl, end))
					return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
			}
			return XDP_PASS;
		}
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = l3;
		if ((void *)(ip6 + 1) > end)
			return XDP_PASS;
		__u8 *d = ip6->daddr.in6_u.u6_addr8;
		nexthdr = ip6->nexthdr;
		// Hop-by-Hop options in transit are forwarded (RFC 9098); those for the
		// router are to its addresses or multicast, passed here.
		if (d[0] == 0xff ||                          // ff00::/8 multicast
		    (d[0] == 0xfe && (d[1] & 0xc0) == 0x80))   // fe80::/10 link-local
			return XDP_PASS;
		__builtin_memcpy(&key, d, sizeof(key));
	} else {
		// ARP, LLDP, anything not IP: the kernel's business.
		return XDP_PASS;
	}

	__u8 *kind = bpf_map_lookup_elem(&local_addrs, &key);
	if (kind) {
		// IPv6 ESP right after the fixed header (the fast path looks no further), or
		// in fragments, the fragment header right after it (the fast path reassembles).
		if ((*kind & LOCAL_ESP) && nexthdr == IPPROTO_ESP)
			return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
		if ((*kind & LOCAL_ESP) && nexthdr == IPPROTO_FRAGMENT) {
			__u8 *frag = (__u8 *)l3 + 40;
			if ((void *)(frag + 1) <= end && frag[0] == IPPROTO_ESP)
				return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
		}
		if ((*kind & LOCAL_NATT) && nexthdr == IPPROTO_UDP &&
		    natt_packet((__u8 *)l3 + 40, end))
			return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
		return XDP_PASS;
	}
	// No socket on this queue: the kernel gets the frame rather than a silent drop.
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}
