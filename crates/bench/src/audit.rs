//! `bench audit`: how long the bridge's statement audit (`audit_statements`) takes to mask one
//! statement of the longest length a record keeps (64 KiB), for ordinary texts and for texts
//! made so that a reading which goes back over what it has read would take seconds. The bridge
//! masks on its one thread, so this time is a stall of every tunnel it serves.

use std::time::Instant;

use anyhow::Result;

use crate::sample::median;

/// Options of `bench audit`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Maskings of each text; the median is printed.
    #[arg(long, default_value_t = 20)]
    pub runs: usize,
}

/// The longest statement text an audit record keeps.
const LENGTH: usize = 64 * 1024;

/// `piece` repeated to about [`LENGTH`], between `head` and `tail`.
fn text(head: &str, piece: &str, tail: &str) -> String {
    let fill = (LENGTH - head.len() - tail.len()) / piece.len();
    format!("{head}{}{tail}", piece.repeat(fill))
}

/// Prints, for each text, the median time to mask it as an ordinary session does and as a
/// strict one does (everything after the first `password` cut).
pub fn run(args: Args) -> Result<()> {
    let texts = [
        (
            "rows of literals",
            text(
                "INSERT INTO t VALUES ",
                "(1, 'abc', 'def'),\n",
                "(0, '', '')",
            ),
        ),
        (
            "role passwords",
            text("", "ALTER ROLE x PASSWORD 'secret'; ", ""),
        ),
        (
            "nested comments never closed",
            text("SELECT 1 ", "/* /* */ ", "ALTER ROLE x PASSWORD 'secret'"),
        ),
        (
            "'--' repeated",
            text("SELECT password IN (", "'--'--", "'secret')"),
        ),
        (
            "'/*' repeated",
            text("SELECT password IN (", "'/*'/*", "'secret')"),
        ),
        ("dollar tags", text("SELECT ", "$a$ ", "")),
    ];
    println!(
        "{:<30} {:>12} {:>12}",
        "64 KiB text", "masked ms", "strict ms"
    );
    for (label, text) in &texts {
        let time = |strict: bool| {
            let times: Vec<f64> = (0..args.runs.max(1))
                .map(|_| {
                    let start = Instant::now();
                    std::hint::black_box(bridge::forward::audited(text, strict, false));
                    start.elapsed().as_secs_f64() * 1e3
                })
                .collect();
            median(&times)
        };
        println!("{label:<30} {:>12.3} {:>12.3}", time(false), time(true));
    }
    Ok(())
}
