//! The commit the server is built from, for `mqstore_build_info` (`MQSTORE_COMMIT` when set,
//! as a build from a source archive without `.git` may give it; else `git rev-parse`; else
//! "unknown").

fn main() {
    println!("cargo:rerun-if-env-changed=MQSTORE_COMMIT");
    println!("cargo:rerun-if-changed=../.git/HEAD");
    println!("cargo:rerun-if-changed=../.git/refs/heads");
    let commit = std::env::var("MQSTORE_COMMIT").ok().or_else(|| {
        let out = std::process::Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .output()
            .ok()?;
        let commit = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !commit.trim().is_empty()).then(|| commit.trim().to_owned())
    });
    println!(
        "cargo:rustc-env=MQSTORE_COMMIT={}",
        commit.unwrap_or_else(|| "unknown".into())
    );
}
