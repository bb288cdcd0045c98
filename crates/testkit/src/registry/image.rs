//! Small images built here as OCI layouts (one layer, or an index of several platforms), for
//! `skopeo` to push into the test registry.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::run;

/// A one-layer image in an OCI layout, tagged `latest`.
pub struct OciImage {
    /// The layout's directory.
    pub dir: PathBuf,
    /// `sha256:…` of the image manifest.
    pub manifest_digest: String,
    /// `sha256:…` of the (gzipped) layer.
    pub layer_digest: String,
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn put_blob(dir: &Path, bytes: &[u8]) -> (String, usize) {
    let hex = sha256_hex(bytes);
    std::fs::write(dir.join("blobs/sha256").join(&hex), bytes).expect("blob");
    (format!("sha256:{hex}"), bytes.len())
}

/// Builds, in `dir`, an image whose one layer holds `file` with `content`.
pub fn oci_image(dir: &Path, file: &str, content: &[u8]) -> OciImage {
    let layout = new_layout(dir);
    let (manifest_digest, manifest_size, layer_digest) =
        write_image(dir, &layout, "amd64", file, content);
    write_index(
        &layout,
        "application/vnd.oci.image.manifest.v1+json",
        &manifest_digest,
        manifest_size,
    );
    OciImage {
        dir: layout,
        manifest_digest,
        layer_digest,
    }
}

/// Builds, in `dir`, a multi-arch image: an OCI image index over one image per
/// `(architecture, content)`. `manifest_digest` is the index's; `layer_digest` the first
/// image's layer.
pub fn oci_multi_arch(dir: &Path, file: &str, variants: &[(&str, &[u8])]) -> OciImage {
    let layout = new_layout(dir);
    let mut manifests = Vec::new();
    let mut first_layer = String::new();
    for (i, (arch, content)) in variants.iter().enumerate() {
        let work = dir.join(format!("variant-{i}"));
        std::fs::create_dir_all(&work).expect("variant dir");
        let (digest, size, layer) = write_image(&work, &layout, arch, file, content);
        if i == 0 {
            first_layer = layer;
        }
        manifests.push(serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest, "size": size,
            "platform": {"architecture": arch, "os": "linux"},
        }));
    }
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": manifests,
    })
    .to_string();
    let (index_digest, index_size) = put_blob(&layout, index.as_bytes());
    write_index(
        &layout,
        "application/vnd.oci.image.index.v1+json",
        &index_digest,
        index_size,
    );
    OciImage {
        dir: layout,
        manifest_digest: index_digest,
        layer_digest: first_layer,
    }
}

fn new_layout(dir: &Path) -> PathBuf {
    let layout = dir.join("layout");
    std::fs::create_dir_all(layout.join("blobs/sha256")).expect("layout");
    std::fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .expect("oci-layout");
    layout
}

/// The layout's `index.json`, tagging `digest` as `latest`.
fn write_index(layout: &Path, media_type: &str, digest: &str, size: usize) {
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": media_type, "digest": digest, "size": size,
            "annotations": {"org.opencontainers.image.ref.name": "latest"},
        }],
    })
    .to_string();
    std::fs::write(layout.join("index.json"), index).expect("index");
}

/// One image's layer, config and manifest into `layout`'s blobs (working files in `work`):
/// (manifest digest, manifest size, layer digest).
fn write_image(
    work: &Path,
    layout: &Path,
    arch: &str,
    file: &str,
    content: &[u8],
) -> (String, usize, String) {
    let src = work.join("src");
    std::fs::create_dir_all(&src).expect("src");
    std::fs::write(src.join(file), content).expect("layer file");
    let tar = work.join("layer.tar");
    run(
        "tar",
        &[
            "--sort=name",
            "--mtime=@0",
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "-cf",
            &tar.display().to_string(),
            "-C",
            &src.display().to_string(),
            ".",
        ],
    );
    let tar_bytes = std::fs::read(&tar).expect("layer tar");
    let diff_id = format!("sha256:{}", sha256_hex(&tar_bytes));
    run("gzip", &["-n", "-1", "-f", &tar.display().to_string()]);
    let gz = std::fs::read(work.join("layer.tar.gz")).expect("layer gz");
    let (layer_digest, layer_size) = put_blob(layout, &gz);
    let config = serde_json::json!({
        "architecture": arch, "os": "linux", "config": {},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    })
    .to_string();
    let (config_digest, config_size) = put_blob(layout, config.as_bytes());
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer_digest, "size": layer_size}],
    })
    .to_string();
    let (manifest_digest, manifest_size) = put_blob(layout, manifest.as_bytes());
    (manifest_digest, manifest_size, layer_digest)
}
