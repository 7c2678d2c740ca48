//! Bearer tokens to principals. Tokens are stored only as SHA-256 digests, so a lookup
//! hashes the presented token and finds the row by its digest; a disabled principal is
//! treated like an unknown one.

use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::db::{DbError, Queries};
use crate::telemetry::Secret;

/// SHA-256 of a token, as stored in `owners.token_sha256` / `scanners.token_sha256`.
pub fn token_digest(token: &Secret<String>) -> Vec<u8> {
    Sha256::digest(token.expose().as_bytes()).to_vec()
}

/// An authenticated scanner.
#[derive(Debug, Clone, Copy)]
pub struct Scanner {
    pub id: Uuid,
    /// Set when the scanner may work only for this owner.
    pub owner_id: Option<Uuid>,
}

/// An authenticated owner.
#[derive(Debug, Clone, Copy)]
pub struct Owner {
    pub id: Uuid,
    pub is_admin: bool,
}

// Both lookups go through the UNIQUE index on token_sha256.
const SCANNER_BY_TOKEN: &str =
    "SELECT id, owner_id FROM scanners WHERE token_sha256 = $1 AND NOT disabled";
const OWNER_BY_TOKEN: &str =
    "SELECT id, is_admin FROM owners WHERE token_sha256 = $1 AND NOT disabled";

pub fn scanner(db: &mut impl Queries, token: &Secret<String>) -> Result<Option<Scanner>, DbError> {
    let row = db.query_opt(SCANNER_BY_TOKEN, &[&token_digest(token)])?;
    Ok(row.map(|r| Scanner {
        id: r.get(0),
        owner_id: r.get(1),
    }))
}

pub fn owner(db: &mut impl Queries, token: &Secret<String>) -> Result<Option<Owner>, DbError> {
    let row = db.query_opt(OWNER_BY_TOKEN, &[&token_digest(token)])?;
    Ok(row.map(|r| Owner {
        id: r.get(0),
        is_admin: r.get(1),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_sha256_of_the_token_bytes() {
        let d = token_digest(&Secret::new("abc".to_string()));
        assert_eq!(
            hex::encode(d),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
