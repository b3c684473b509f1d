//! The one table of `run`'s settings: [`settings!`] turns each entry (its flag's clap attributes,
//! its file key's serde attributes, help, default, whether a reload adopts it) into a field of
//! `RunArgs` (flag, `RUNQLAT_*` variable and file key at once), a line of `RunArgs::or`, and a
//! [`Setting`] in `SETTINGS`, from which `--help`, docs/configuration.md and
//! deploy/latency-daemon.toml are written (`reference`).

/// When a running daemon adopts a new value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Apply {
    /// At once, on SIGHUP.
    Reload,
    /// At the next start: it sizes a socket, a kernel map or the kernel program's constants (which
    /// need the capabilities dropped after attach), or the shape of every window already kept.
    Restart,
    /// On SIGHUP when raised or turned off; lowered below the lowest threshold set at start (the
    /// kernel's attribution threshold), or turned on, at the next start.
    Raise,
    /// Read once, at start: the file the others come from.
    Start,
}

impl Apply {
    /// As the reference tables write it.
    pub fn describe(self) -> &'static str {
        match self {
            Apply::Reload => "reload",
            Apply::Restart => "restart",
            Apply::Raise => "reload if raised; restart if lowered",
            Apply::Start => "start",
        }
    }
}

/// One setting as the reference shows it. The flag, its aliases and its variable come from clap's
/// own `Command` (so they are what the parser takes), the file's value of the default from
/// `Config::default()` (so it is what the daemon uses).
#[derive(Clone, Copy, Debug)]
pub struct Setting {
    /// The file key, and the field of `RunArgs` and (for most) `Config`.
    pub key: &'static str,
    /// The heading it starts, if it is the first of a group, and the group's introduction.
    pub section: Option<(&'static str, &'static str)>,
    /// One sentence for `--help`, the reference and the example file.
    pub help: &'static str,
    /// More for the reference and the example file only.
    pub more: Option<&'static str>,
    /// As `--help` shows it: a value the setting's parser takes, or `off`, or (when `described`)
    /// words that describe a long value.
    pub default: &'static str,
    pub described: bool,
    /// A TOML value shown commented out in the example file, for a setting without a default.
    pub example: Option<&'static str>,
    pub apply: Apply,
    /// Only in the file (no flag, no variable): tables a flag cannot hold.
    pub file_only: bool,
}

/// `Some(x)` for an optional macro fragment that is there, `None` otherwise.
macro_rules! some {
    () => {
        None
    };
    ($x:expr) => {
        Some($x)
    };
}

/// The table: each entry is the field's attributes (clap's `#[arg]`, serde's `#[serde]`), `key:
/// Type`, and `{ section, help, more, default, described, example, file_only, apply }`. See the module's introduction.
macro_rules! settings {
    (
        $(#[$struct_meta:meta])*
        pub struct $name:ident {
            $(
                $(#[$field_meta:meta])*
                $key:ident: $ty:ty {
                    $(section: $section:literal => $intro:literal,)?
                    help: $help:literal,
                    $(more: $more:literal,)?
                    default: $default:literal,
                    $(described: $described:literal,)?
                    $(example: $example:literal,)?
                    $(file_only: $file_only:literal,)?
                    apply: $apply:ident $(,)?
                }
            ),* $(,)?
        }
    ) => {
        $(#[$struct_meta])*
        pub struct $name {
            $(
                #[doc = $help]
                #[arg(help = concat!($help, " [default: ", $default, "]"))]
                $(#[$field_meta])*
                pub $key: Option<$ty>,
            )*
        }

        impl $name {
            /// Each field from `self` if set there, else from `lower`.
            pub(super) fn or(self, lower: $name) -> $name {
                $name { $($key: self.$key.or(lower.$key),)* }
            }
        }

        /// Every setting, in the order of `run --help` and of the file.
        pub const SETTINGS: &[$crate::config::settings::Setting] = &[$(
            $crate::config::settings::Setting {
                key: stringify!($key),
                section: some!($(($section, $intro))?),
                help: $help,
                more: some!($($more)?),
                default: $default,
                described: false $(|| $described)?,
                example: some!($($example)?),
                apply: $crate::config::settings::Apply::$apply,
                file_only: false $(|| $file_only)?,
            },
        )*];
    };
}
