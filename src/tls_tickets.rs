//! Session-ticket keys shared by every worker, rotated by the supervisor.
//!
//! A TLS 1.3 (or 1.2) client that resumes a session presents a ticket the
//! server encrypted earlier. With one key per process, a client resumes only
//! with the worker it first met, and `SO_REUSEPORT` sends it to any of them.
//! So the supervisor maps a page of keys before it forks ([`TicketKeys`]):
//! a current and a previous AES-256-GCM key, each with an id. Every worker's
//! rustls `ServerConfig` uses [`SharedTicketer`], which seals tickets with
//! the current key and opens them with whichever key their id names.
//!
//! Rotation is the supervisor's: `rotate()` (called from its loop when due)
//! draws a new key, keeps the one before as previous and overwrites the
//! oldest, so a ticket lives at most two periods and a leaked process
//! memory image cannot open tickets older than that (rustls asks that the
//! lifetime be enforced by erasing keys, not by a date in the ticket).
//! Readers use a sequence counter (odd while the supervisor writes) and
//! retry, so they never see half a key.
//!
//! Ticket layout: key id (8 bytes, little-endian), nonce (12 random bytes),
//! then the sealed session state with its 16-byte tag.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;

use pyo3::prelude::*;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use rustls::server::ProducesTickets;

/// How long a key is current; a ticket is accepted for up to twice this.
pub const ROTATION_SECONDS: u32 = 6 * 3600;

/// Key words per key (32 bytes).
const KEY_WORDS: usize = 4;

/// The shared page: written by the supervisor only, under `sequence`.
#[repr(C)]
struct Page {
    sequence: AtomicU64,
    /// Ids of the current and the previous key (0: none).
    ids: [AtomicU64; 2],
    keys: [[AtomicU64; KEY_WORDS]; 2],
}

/// The keys as a reader copied them.
#[derive(Clone, Copy)]
struct Keys {
    ids: [u64; 2],
    keys: [[u8; 32]; 2],
}

/// The page of ticket keys (see the module).
#[pyclass(module = "rush._rush", frozen)]
pub struct TicketKeys {
    page: &'static Page,
}

#[pymethods]
impl TicketKeys {
    /// Maps the page and draws the first key (the supervisor, before forking).
    #[new]
    fn new() -> PyResult<Self> {
        let keys = TicketKeys::map()?;
        keys.draw()?;
        Ok(keys)
    }

    /// Draws a new current key; the current one becomes the previous one
    /// and the previous one is erased.
    fn rotate(&self) -> PyResult<()> {
        Ok(self.draw()?)
    }

    /// Seconds between rotations.
    #[staticmethod]
    fn rotation_seconds() -> u32 {
        ROTATION_SECONDS
    }
}

impl TicketKeys {
    /// See `rotate`.
    fn draw(&self) -> std::io::Result<()> {
        let mut fresh = [0u8; 32];
        SystemRandom::new()
            .fill(&mut fresh)
            .map_err(|_| std::io::Error::other("no randomness for a ticket key"))?;
        let page = self.page;
        let sequence = page.sequence.load(Ordering::Relaxed);
        page.sequence.store(sequence + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        let current_id = page.ids[0].load(Ordering::Relaxed);
        page.ids[1].store(current_id, Ordering::Relaxed);
        for word in 0..KEY_WORDS {
            let current = page.keys[0][word].load(Ordering::Relaxed);
            page.keys[1][word].store(current, Ordering::Relaxed);
        }
        page.ids[0].store(current_id + 1, Ordering::Relaxed);
        for (word, chunk) in fresh.chunks(8).enumerate() {
            let value = u64::from_ne_bytes(chunk.try_into().expect("8-byte chunks"));
            page.keys[0][word].store(value, Ordering::Relaxed);
        }
        page.sequence.store(sequence + 2, Ordering::Release);
        Ok(())
    }

    fn map() -> std::io::Result<TicketKeys> {
        let length = std::mem::size_of::<Page>();
        let address = crate::shared_memory::map_shared(length)?;
        // SAFETY: the mapping is page-aligned and zero-filled (zero is a
        // valid AtomicU64), at least size_of::<Page>() long, and never
        // unmapped: the 'static reference stays valid in this process and
        // in every child forked after this.
        let page = unsafe { &*address.cast::<Page>() };
        Ok(TicketKeys { page })
    }

    /// A ticketer for one worker's rustls configuration.
    pub fn ticketer(&self) -> Arc<dyn ProducesTickets> {
        Arc::new(SharedTicketer {
            page: self.page,
            random: SystemRandom::new(),
        })
    }
}

/// Seals and opens tickets with the shared keys.
pub struct SharedTicketer {
    page: &'static Page,
    random: SystemRandom,
}

impl std::fmt::Debug for SharedTicketer {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("SharedTicketer")
    }
}

impl SharedTicketer {
    /// A consistent copy of the keys (retried while the supervisor writes).
    fn keys(&self) -> Keys {
        let page = self.page;
        loop {
            let before = page.sequence.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let mut keys = Keys {
                ids: [
                    page.ids[0].load(Ordering::Relaxed),
                    page.ids[1].load(Ordering::Relaxed),
                ],
                keys: [[0; 32]; 2],
            };
            for slot in 0..2 {
                for word in 0..KEY_WORDS {
                    let value = page.keys[slot][word].load(Ordering::Relaxed);
                    keys.keys[slot][word * 8..word * 8 + 8].copy_from_slice(&value.to_ne_bytes());
                }
            }
            fence(Ordering::Acquire);
            if page.sequence.load(Ordering::Relaxed) == before {
                return keys;
            }
        }
    }
}

fn sealing_key(bytes: &[u8; 32]) -> Option<LessSafeKey> {
    UnboundKey::new(&AES_256_GCM, bytes)
        .ok()
        .map(LessSafeKey::new)
}

impl ProducesTickets for SharedTicketer {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        ROTATION_SECONDS
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let keys = self.keys();
        if keys.ids[0] == 0 {
            return None;
        }
        let key = sealing_key(&keys.keys[0])?;
        let mut nonce = [0u8; NONCE_LEN];
        self.random.fill(&mut nonce).ok()?;
        let mut ticket = Vec::with_capacity(8 + NONCE_LEN + plain.len() + 16);
        ticket.extend_from_slice(&keys.ids[0].to_le_bytes());
        ticket.extend_from_slice(&nonce);
        let mut sealed = plain.to_vec();
        key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::empty(),
            &mut sealed,
        )
        .ok()?;
        ticket.extend_from_slice(&sealed);
        Some(ticket)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        let id = u64::from_le_bytes(cipher.get(..8)?.try_into().ok()?);
        let nonce: [u8; NONCE_LEN] = cipher.get(8..8 + NONCE_LEN)?.try_into().ok()?;
        let keys = self.keys();
        let slot = keys
            .ids
            .iter()
            .position(|&known| known == id && known != 0)?;
        let key = sealing_key(&keys.keys[slot])?;
        let mut opened = cipher.get(8 + NONCE_LEN..)?.to_vec();
        let plain = key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::empty(),
                &mut opened,
            )
            .ok()?;
        Some(plain.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_open_with_the_current_and_previous_key_only() {
        let keys = TicketKeys::map().unwrap();
        let ticketer = keys.ticketer();
        assert!(ticketer.encrypt(b"state").is_none(), "no key drawn yet");
        keys.draw().unwrap();
        let first = ticketer.encrypt(b"session state").unwrap();
        assert_eq!(ticketer.decrypt(&first).unwrap(), b"session state");
        keys.draw().unwrap();
        assert_eq!(
            ticketer.decrypt(&first).unwrap(),
            b"session state",
            "previous key"
        );
        keys.draw().unwrap();
        assert!(
            ticketer.decrypt(&first).is_none(),
            "erased after two rotations"
        );
        let mut tampered = ticketer.encrypt(b"x").unwrap();
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        assert!(ticketer.decrypt(&tampered).is_none());
        assert!(ticketer.decrypt(b"short").is_none());
    }
}
