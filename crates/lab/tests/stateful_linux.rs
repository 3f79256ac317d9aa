//! The stateful generator through a real Linux stateful firewall, as `ferrouter-lab bench
//! stateful` runs it: a tester namespace with AF_PACKET ports, a DUT namespace with kernel
//! forwarding and nftables + conntrack (policy drop, new connections only from a SYN,
//! strict TCP window tracking). 2,000 TCP connections and 2,000 UDP pairs at 1,000/s:
//! every one started must complete, and the DUT's conntrack must have tracked each. Needs root,
//! iproute2, nftables and conntrack (the test fails, saying which, otherwise: never a
//! silent pass). The namespaces `sfNNNN-t` / `sfNNNN-d` are deleted however it ends.

use std::process::Command;

use lab::stateful::{run, Options};
use tester::Proto;

#[test]
fn tcp_connections_and_udp_pairs_complete_through_nftables_with_conntrack() {
    lab::preconditions(
        "network namespaces, nftables",
        &[
            ("ip", "iproute2"),
            ("nft", "nftables"),
            ("conntrack", "conntrack"),
        ],
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    let prefix = format!("sf{}", std::process::id() % 10000);
    let opts = Options {
        prefix: prefix.clone(),
        protos: vec![Proto::Tcp, Proto::Udp],
        conns: 2000,
        cps: 1000.0,
        ..Options::default()
    };
    let report = run(&opts, &|m| eprintln!("... {m}")).unwrap_or_else(|e| panic!("{e:#}"));
    eprint!("{}", lab::stateful::table(&report));

    // The topology is gone, whatever happened.
    let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(
        !list.lines().any(|l| l.starts_with(&format!("{prefix}-"))),
        "namespaces left behind: {list}"
    );

    assert_eq!(report.runs.len(), 2);
    for run in &report.runs {
        let t = &run.tester;
        let d = &run.dut;
        let proto = t.proto.unwrap();
        assert!(t.balanced(), "{t:#?}");
        // Every connection the tester started completed. It starts them all unless it was
        // descheduled for more than its 200 ms of allowed lag (a shared machine): then a few
        // are given up, counted as skipped (late), never as the DUT's failures.
        assert_eq!(t.planned, 2000, "{proto}");
        assert_eq!(t.completed, t.attempted, "{proto}: {t:#?}");
        assert_eq!((t.failed, t.reset, t.unfinished), (0, 0, 0), "{proto}");
        assert_eq!((t.skipped.concurrency, t.skipped.tuples), (0, 0), "{proto}");
        assert!(
            t.skipped.late <= 20,
            "{proto}: the tester fell behind: {:?}",
            t.skipped
        );
        let n = t.attempted;
        assert_eq!((t.rx_malformed, t.rx_out_of_order), (0, 0), "{proto}");
        assert_eq!(t.transaction_latency.samples, n, "{proto}");
        // Linux tracked every connection from its first packet, found nothing invalid
        // (sequence numbers, windows, checksums) and dropped nothing.
        assert_eq!((d.invalid, d.dropped), (0, 0), "{proto}: {d:?}");
        match proto {
            Proto::Tcp => {
                assert_eq!(d.new_tcp, n + t.syn_retransmits, "{d:?}");
                assert_eq!(d.new_udp, 0);
                // Every connection closed by both sides, as conntrack saw it.
                assert_eq!(d.conntrack_entries, n, "TCP entries in TIME_WAIT");
                // Everything but the SYNs passed as established: per connection the
                // client's ACK, request, FIN and last ACK and the server's SYN-ACK,
                // response and FIN-ACK.
                assert_eq!(d.established, n * 7, "{d:?}");
            }
            Proto::Udp => {
                assert_eq!(d.new_udp, n + t.request_retransmits, "{d:?}");
                assert_eq!(d.new_tcp, 0);
                assert_eq!(d.conntrack_entries, n, "UDP entries");
                assert_eq!(d.established, n, "the responses");
            }
        }
    }
}
