//! Certificates for clusters on one machine over mutual TLS (the bench's `--tls` runs and the
//! TLS tests), made with the `openssl` command: a CA, and certificates it signs.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The extensions of a node's certificate: it serves on 127.0.0.1 and dials its peers with
/// the same certificate.
pub const NODE_EXTENSIONS: &str =
    "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n";

/// The extensions of a client certificate, naming `san` (e.g. `URI:engram:agent:bob`) if given.
pub fn client_extensions(san: Option<&str>) -> String {
    let mut lines = "extendedKeyUsage=clientAuth\n".to_string();
    if let Some(san) = san {
        lines.push_str(&format!("subjectAltName={san}\n"));
    }
    lines
}

const EC: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

fn openssl(dir: &Path, args: &[&str]) -> Result<()> {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .context("running openssl (needed to make TLS certificates)")?;
    if !out.status.success() {
        bail!("openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// A CA in `dir`: `<ca>-ca.pem` and `<ca>-ca.key`, valid for two days.
pub fn make_ca(dir: &Path, ca: &str) -> Result<()> {
    let (key, pem, subject) = (
        format!("{ca}-ca.key"),
        format!("{ca}-ca.pem"),
        format!("/CN={ca}-ca"),
    );
    openssl(
        dir,
        &[
            &["req", "-x509"][..],
            &EC,
            &["-keyout", &key, "-out", &pem, "-days", "2", "-subj", &subject],
        ]
        .concat(),
    )
}

/// A certificate for `subject` with `extensions` (an openssl extension file's lines), signed
/// by the CA [`make_ca`] made as `ca`: `<name>.pem` and `<name>.key` in `dir`.
pub fn issue(dir: &Path, ca: &str, name: &str, subject: &str, extensions: &str) -> Result<()> {
    let (key, csr, pem, cnf) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
        format!("{name}.cnf"),
    );
    openssl(
        dir,
        &[
            &["req"][..],
            &EC,
            &["-keyout", &key, "-out", &csr, "-subj", subject],
        ]
        .concat(),
    )?;
    std::fs::write(dir.join(&cnf), extensions).with_context(|| format!("writing {cnf}"))?;
    let (ca_pem, ca_key) = (format!("{ca}-ca.pem"), format!("{ca}-ca.key"));
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_pem,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            &cnf,
        ],
    )
}
