//! The credentials a request carries, as read from files by `config`: a [`Secret`] (never
//! printed) in, an [`Auth`] out for the [`Client`](super::Client) to send.
use std::fmt;

/// A secret read from a file; never printed.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<hidden>)")
    }
}

/// Credentials every sink sends (a URL's own `user:password@` wins for that URL).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Auth {
    Basic { user: String, password: Secret },
    Bearer(Secret),
}
