//! What goes over a host's socket: one JSON line each way.

use dgem_service::DecisionRequest;
use serde::{Deserialize, Serialize};

use crate::failure::{internal, user, Failure};

/// The protocol version. A host answers a request of another version with
/// [`HostReply::unreadable`], and the client then decides in process.
pub const PROTOCOL: u32 = 1;

/// Largest request or reply line (a policy and its state, or the output);
/// a larger request is decided in process instead.
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// A request and the protocol version it is written in.
#[derive(Debug, Serialize, Deserialize)]
pub struct Envelope {
    /// [`PROTOCOL`] of the sender.
    pub protocol: u32,
    /// The request.
    pub request: HostRequest,
}

/// What a client asks a host for.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HostRequest {
    /// Is it there and ready? The reply's `stdout` says the model, the
    /// version and how many decisions it has made.
    Ping,
    /// Exit now.
    Stop,
    /// Decide, and render the output as `dgem decide` prints it.
    Decide {
        /// The template's name, as the caller found it.
        policy: String,
        /// Its text (read by the caller, from the caller's folder).
        text: String,
        /// The decision service's request.
        request: Box<DecisionRequest>,
        /// `--json`.
        json: bool,
        /// `--stats`.
        stats: bool,
    },
}

/// A host's answer.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct HostReply {
    /// The exit code `decide` would have: 0 ok, 1 user error, 2 internal.
    pub exit: u8,
    /// What `decide` prints on stdout.
    pub stdout: String,
    /// The error and its causes, outermost first, when `exit` is not 0.
    #[serde(default)]
    pub error: Vec<String>,
    /// Lines `decide` prints on stderr besides the error (warnings the
    /// model's load gave, once per decision as a process would give them).
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Set when the host could not read the request (another protocol, a
    /// line too long): the client decides in process instead.
    #[serde(default)]
    pub unreadable: bool,
}

impl HostReply {
    /// A successful reply printing `stdout`.
    pub fn ok(stdout: String) -> Self {
        Self {
            stdout,
            ..Self::default()
        }
    }

    /// The reply of a failed decision.
    pub fn failed(f: &Failure) -> Self {
        let (exit, e) = match f {
            Failure::User(e) => (1, e),
            Failure::Internal(e) => (2, e),
        };
        Self {
            exit,
            error: e.chain().map(ToString::to_string).collect(),
            ..Self::default()
        }
    }

    /// The reply to a request the host cannot read.
    pub fn unreadable(why: &str) -> Self {
        Self {
            exit: 2,
            error: vec![why.to_string()],
            unreadable: true,
            ..Self::default()
        }
    }

    /// The reply as `decide`'s own result: warnings on stderr, stdout
    /// printed, a failure with the host's error and causes.
    ///
    /// # Errors
    /// The [`Failure`] the host reported.
    pub fn into_result(self) -> Result<(), Failure> {
        for w in &self.warnings {
            eprintln!("{w}");
        }
        print!("{}", self.stdout);
        if self.exit == 0 {
            return Ok(());
        }
        let mut chain = self.error.into_iter().rev();
        let mut e = anyhow::anyhow!("{}", chain.next().unwrap_or_default());
        for outer in chain {
            e = e.context(outer);
        }
        Err(if self.exit == 1 { user(e) } else { internal(e) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_chain_comes_back_as_the_same_chain() {
        let f = user(anyhow::anyhow!("inner cause").context("outer message"));
        let reply = HostReply::failed(&f);
        assert_eq!(reply.error, ["outer message", "inner cause"]);
        let Err(back) = reply.into_result() else {
            panic!("a failure")
        };
        let Failure::User(e) = back else {
            panic!("a user failure")
        };
        let chain: Vec<String> = e.chain().map(ToString::to_string).collect();
        assert_eq!(chain, ["outer message", "inner cause"]);
    }

    /// The typed post-read values cross the socket inside the tagged
    /// request (serde's buffered path, the request's options flattened) and
    /// come back as the same values.
    #[test]
    fn typed_post_read_values_cross_the_socket_unchanged() {
        let obj = serde_json::json!({
            "template": "support_triage",
            "temperature": {"choice": 1.4, "YesNo": 2},
            "abstain_above": {"team": 0.5, "*": 0.7},
            "abstain_below": 0.2,
            "cascade_mode": "on_miss",
            "cascade_threshold": 0.3,
            "cascade_model": "m",
            "expected_answers": {"urgent": true},
            "suggest_expansions": true,
            "expansion_entropy": 0.5,
        });
        let serde_json::Value::Object(obj) = obj else {
            panic!("an object")
        };
        let request = DecisionRequest::from_object(&obj, &dgem_service::Surface::API)
            .expect("a valid request");
        let line = serde_json::to_string(&Envelope {
            protocol: PROTOCOL,
            request: HostRequest::Decide {
                policy: "support_triage".into(),
                text: String::new(),
                request: Box::new(request.clone()),
                json: true,
                stats: false,
            },
        })
        .expect("writes");
        let back: Envelope = serde_json::from_str(&line).expect("reads");
        let HostRequest::Decide { request: back, .. } = back.request else {
            panic!("a decision")
        };
        assert_eq!(*back, request);
    }
}
