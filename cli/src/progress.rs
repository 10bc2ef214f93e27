//! `mqstore bench`'s progress on stderr: a bar per level on a terminal (indicatif), and one
//! line per round when stderr is not a terminal (a log file gets no bar frames).

use mqstore_server::bench::Progress;

#[derive(Default)]
pub struct BenchProgress {
    bar: Option<indicatif::ProgressBar>,
}

impl BenchProgress {
    pub fn show(&mut self, progress: Progress) {
        let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
        match progress {
            Progress::Level { in_flight, rounds } if terminal => {
                let bar = indicatif::ProgressBar::new(u64::from(rounds));
                if let Ok(style) = indicatif::ProgressStyle::with_template(
                    "{prefix:>14} [{bar:30}] round {pos}/{len} {msg}",
                ) {
                    bar.set_style(style.progress_chars("#>-"));
                }
                bar.set_prefix(format!("{in_flight} in flight"));
                self.bar = Some(bar);
            }
            Progress::Level { .. } => {}
            Progress::Round {
                in_flight,
                round,
                rounds,
                mqstore_ops,
                echo_ops,
            } => {
                let message = format!("mqstore {mqstore_ops} ops, echo {echo_ops} ops");
                match &self.bar {
                    Some(bar) => {
                        bar.set_position(u64::from(round));
                        bar.set_message(message);
                    }
                    None => {
                        eprintln!("bench: {in_flight} in flight, round {round}/{rounds}: {message}")
                    }
                }
            }
            Progress::LevelDone { .. } => {
                if let Some(bar) = self.bar.take() {
                    bar.finish();
                }
            }
        }
    }
}
