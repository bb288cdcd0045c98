//! Why a login to a declared database failed, told three ways: to `bridge check` (every
//! detail), to the session's client (no internal names) and to the audit record (the step).

/// Why a login failed, by the step that failed (what `bridge check` prints).
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    /// The host name did not resolve.
    #[error("DNS: cannot resolve {host:?}: {cause}")]
    Dns {
        /// The entry's host.
        host: String,
        /// The resolver's error.
        cause: String,
    },
    /// No TCP connection.
    #[error("TCP: cannot connect to {addr}: {cause}; check that the bridge host can reach it")]
    Tcp {
        /// `host:port`.
        addr: String,
        /// The socket error.
        cause: String,
    },
    /// TLS was required and failed (refused by the server, or a certificate not trusted).
    #[error("TLS: {0}")]
    Tls(String),
    /// The server refused the entry's credentials.
    #[error(
        "authentication: the server refused the bridge's credentials for user {user:?} ({code}: {message}); fix databases[].credentials, or the server's pg_hba.conf"
    )]
    Auth {
        /// The entry's user.
        user: String,
        /// SQLSTATE, e.g. `28P01`.
        code: String,
        /// The server's message.
        message: String,
    },
    /// The entry's database does not exist on the server.
    #[error("database: {message} ({code}); fix databases[].database")]
    DatabaseMissing {
        /// `3D000`.
        code: String,
        /// The server's message.
        message: String,
    },
    /// The server refused the session for another reason (too many connections, shutting down).
    #[error("server: {message} ({code})")]
    Server {
        /// SQLSTATE.
        code: String,
        /// The server's message.
        message: String,
    },
    /// The server asked for the password in a way that would hand it to whoever answers on an
    /// unverified connection.
    #[error("authentication: {0}")]
    Insecure(String),
    /// The server spoke something the bridge does not understand.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The server did not finish the login in time (it went silent).
    #[error("the server did not finish the login within {0} s")]
    TimedOut(u64),
}

impl LoginError {
    /// The SQLSTATE a client is told: the server's own, or `08001` when the bridge could not
    /// reach the database at all.
    pub fn sqlstate(&self) -> &str {
        match self {
            LoginError::Auth { .. } | LoginError::Insecure(_) => "28000",
            LoginError::DatabaseMissing { code, .. } | LoginError::Server { code, .. } => code,
            _ => "08001",
        }
    }

    /// What a client of the session may read: the step, and the server's own words where the
    /// server spoke, never the bridge's internal host names, addresses or socket errors.
    pub fn public(&self) -> String {
        match self {
            LoginError::Dns { .. } | LoginError::Tcp { .. } => {
                format!(
                    "{} failed: the bridge cannot reach it",
                    self.step().to_uppercase()
                )
            }
            LoginError::Tls(_) => "TLS to it failed (see the entry's sslmode)".into(),
            // The server's words stay in the bridge's log: a pg_hba.conf refusal names the
            // bridge's internal address, the entry's user and database.
            LoginError::Auth { code, .. } => format!(
                "the database refused the bridge's login (the server's SQLSTATE {code}); fix databases[].credentials, or the server's pg_hba.conf (the bridge's log has the server's words)"
            ),
            LoginError::DatabaseMissing { message, .. } => {
                format!("{message}; fix databases[].database in the bridge's configuration")
            }
            LoginError::Server { message, .. } => message.clone(),
            LoginError::Insecure(why) => why.clone(),
            LoginError::Protocol(_) => "the login failed (protocol)".into(),
            LoginError::TimedOut(secs) => {
                format!("the database did not finish the login within {secs} s")
            }
        }
    }

    /// The step's name, for metrics-free summaries such as the audit record's `ended`.
    pub fn step(&self) -> &'static str {
        match self {
            LoginError::Dns { .. } => "dns",
            LoginError::Tcp { .. } => "tcp",
            LoginError::Tls(_) => "tls",
            LoginError::Auth { .. } | LoginError::Insecure(_) => "authentication",
            LoginError::DatabaseMissing { .. } => "database",
            LoginError::Server { .. } => "server",
            LoginError::Protocol(_) => "protocol",
            LoginError::TimedOut(_) => "login time-out",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refused login tells the client the step and the SQLSTATE, not the server's message,
    /// which names internal addresses; `bridge check` (the operator's) prints it whole.
    #[test]
    fn a_refused_login_keeps_internal_addresses_from_the_client() {
        let e = LoginError::Auth {
            user: "reporter".into(),
            code: "28000".into(),
            message: "no pg_hba.conf entry for host \"10.2.3.4\", user \"reporter\", database \"orders\", no encryption".into(),
        };
        assert_eq!(e.sqlstate(), "28000");
        let public = e.public();
        assert!(public.contains("databases[].credentials"), "{public}");
        assert!(
            !public.contains("10.2.3.4") && !public.contains("reporter"),
            "{public}"
        );
        assert!(e.to_string().contains("10.2.3.4"), "{e}");
    }

    /// A database missing on the server is the bridge's configuration, and the client is
    /// told which key.
    #[test]
    fn a_missing_database_names_the_key_to_fix() {
        let e = LoginError::DatabaseMissing {
            code: "3D000".into(),
            message: "database \"nope\" does not exist".into(),
        };
        assert_eq!(e.sqlstate(), "3D000");
        assert_eq!(
            e.public(),
            "database \"nope\" does not exist; fix databases[].database in the bridge's configuration"
        );
    }

    /// A silent server is said as such to the client (not as a protocol error), with the
    /// SQLSTATE of a database the bridge could not reach.
    #[test]
    fn a_login_time_out_says_so() {
        let e = LoginError::TimedOut(20);
        assert_eq!(e.sqlstate(), "08001");
        assert_eq!(
            e.public(),
            "the database did not finish the login within 20 s"
        );
    }
}
