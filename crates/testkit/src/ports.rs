//! Loopback ports for servers that must come back on the same port after a restart.
//!
//! A port the kernel hands out for `127.0.0.1:0` lies in its ephemeral range, the range it also
//! takes the local ports of outgoing connections from. While a server is down for a restart, any
//! connection another test opens may take its port, and the restart fails with "Address already
//! in use". Ports below the ephemeral range are never handed out that way, so only another
//! explicit choice (this function's, probed first) can take one.

use std::net::TcpListener;

/// A free loopback port below the kernel's ephemeral range, chosen at random and probed.
pub fn stable_port() -> u16 {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let floor = low.saturating_sub(16384).max(1024);
    let span = u32::from(low.saturating_sub(floor));
    if span == 0 {
        return TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
    }
    for _ in 0..100 {
        let random = uuid::Uuid::new_v4().as_u128() as u32;
        let port = floor + (random % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {floor}..{low} after 100 tries");
}
