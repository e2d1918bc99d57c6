//! What a guest may reach on the network: nothing unless the embedder (or
//! the CLI's `-S` flags) allows it. One policy for commands (`run`) and
//! HTTP handlers (`serve`): sockets (`wasi:sockets`), name lookups, and
//! outgoing HTTP requests (`wasi:http/outgoing-handler`), each allowed on
//! its own.
//!
//! A denied use is the interface's own error for it — `access-denied` from
//! a socket call, `HTTP-request-denied` from an outgoing request — never a
//! trap, so a guest can report it.

use wasmtime_wasi::WasiCtxBuilder;

/// What a guest may reach. The default allows nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetworkPolicy {
    /// TCP and UDP sockets to and from any address (wasmtime's
    /// `-S inherit-network`).
    pub inherit_network: bool,
    /// Name lookups (`wasi:sockets/ip-name-lookup`; wasmtime's
    /// `-S allow-ip-name-lookup`).
    pub allow_ip_name_lookup: bool,
    /// Outgoing HTTP and HTTPS requests (`wasi:http/outgoing-handler`;
    /// `-S http`). They are made by the host, so they are allowed on their
    /// own, apart from sockets.
    pub outgoing_http: bool,
}

impl NetworkPolicy {
    /// Everything allowed: sockets, name lookups and outgoing HTTP.
    pub fn open() -> NetworkPolicy {
        NetworkPolicy {
            inherit_network: true,
            allow_ip_name_lookup: true,
            outgoing_http: true,
        }
    }

    /// Applies the socket part of the policy to a guest's WASI context
    /// (outgoing HTTP is checked by the host's HTTP hooks, `http.rs`).
    pub(crate) fn apply(&self, wasi: &mut WasiCtxBuilder) {
        if self.inherit_network {
            wasi.inherit_network().allow_tcp(true).allow_udp(true);
        }
        wasi.allow_ip_name_lookup(self.allow_ip_name_lookup);
    }

    /// Reads one `-S` option of the CLI (`inherit-network`,
    /// `allow-ip-name-lookup`, `http`, each optionally `=y`/`=n`) into the
    /// policy; the error names the options there are.
    pub fn set(&mut self, option: &str) -> Result<(), String> {
        let (name, value) = match option.split_once('=') {
            Some((n, v)) => (n, v),
            None => (option, "y"),
        };
        let on = match value {
            "y" | "yes" | "true" => true,
            "n" | "no" | "false" => false,
            other => {
                return Err(format!(
                    "-S {name}={other}: the value is y or n (or nothing, for y)"
                ));
            }
        };
        match name {
            "inherit-network" => self.inherit_network = on,
            "allow-ip-name-lookup" => self.allow_ip_name_lookup = on,
            "http" => self.outgoing_http = on,
            other => {
                return Err(format!(
                    "-S {other} is not an option alk knows; there are -S inherit-network (TCP and UDP sockets), -S allow-ip-name-lookup (name lookups) and -S http (outgoing HTTP requests)"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_read_like_wasmtimes_and_unknown_ones_name_the_known() {
        let mut p = NetworkPolicy::default();
        p.set("inherit-network").unwrap();
        p.set("allow-ip-name-lookup=y").unwrap();
        p.set("http=n").unwrap();
        assert_eq!(
            p,
            NetworkPolicy {
                inherit_network: true,
                allow_ip_name_lookup: true,
                outgoing_http: false
            }
        );
        let e = p.set("tcp").unwrap_err();
        assert!(e.contains("-S inherit-network") && e.contains("-S http"), "{e}");
        assert!(p.set("http=maybe").unwrap_err().contains("y or n"));
    }
}
