//! What every client command shares, below the command line's other parts: how it waits and
//! prints ([`CallArgs`]), where a value comes from ([`ValueArgs`]), and writing bytes out.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use clap::Args;

/// How client commands wait and print: before or after the command's name.
#[derive(Args, Clone, Copy)]
#[command(
    next_help_heading = "Client commands (get, set, del, vdel, scan, watch, lock, jobs, groups, templates, command)"
)]
pub(crate) struct CallArgs {
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// How long to wait for each answer from the server: seconds, or a duration such as
    /// 500ms, 10s, 2m, 1h (default 5s; for `command send`, the command's timeout: default 10s).
    #[arg(long, global = true, value_parser = parse_duration)]
    pub(crate) timeout: Option<Duration>,
}

/// `5` (seconds), `500ms`, `10s`, `2m`, `1h`; more than zero.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?}: expected a duration such as 10s, 500ms, 2m or 1h"))?;
    let ms = match unit {
        "" | "s" => number.saturating_mul(1000),
        "ms" => number,
        "m" => number.saturating_mul(60_000),
        "h" => number.saturating_mul(3_600_000),
        _ => return Err(format!("{text:?}: the unit is one of ms, s, m, h")),
    };
    match ms {
        0 => Err("the timeout must be more than zero".into()),
        ms => Ok(Duration::from_millis(ms)),
    }
}

/// A value given on the command line, from standard input (`-`), or from a file.
#[derive(Args)]
#[group(required = true, multiple = false)]
pub(crate) struct ValueArgs {
    /// The value; `-` reads it from standard input (any bytes, any size the broker takes).
    pub(crate) value: Option<String>,
    /// Read the value from this file (any bytes, any size the broker takes).
    #[arg(long)]
    pub(crate) value_file: Option<PathBuf>,
}

impl ValueArgs {
    /// The value's bytes.
    pub(crate) fn read(self) -> Result<Bytes, String> {
        match (self.value, self.value_file) {
            (Some(value), _) if value == "-" => {
                let mut buffer = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut buffer)
                    .map_err(|e| format!("cannot read the value from standard input: {e}"))?;
                Ok(buffer.into())
            }
            (Some(value), _) => Ok(value.into()),
            (None, Some(path)) => std::fs::read(&path)
                .map(Bytes::from)
                .map_err(|e| format!("--value-file {}: {e}", path.display())),
            (None, None) => Err("give a value, `-` for standard input, or --value-file".into()),
        }
    }
}

/// Writes bytes to standard output as they are.
pub(crate) fn write_stdout(bytes: &[u8]) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(bytes).and_then(|()| stdout.flush());
}
