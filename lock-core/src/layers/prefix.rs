//! Namespacing keys.

use std::time::Duration;

use async_trait::async_trait;

use crate::backend::{
    AcquireOutcome, Capabilities, FairWaiter, InstantLockBackend, LockBackend, ReleaseOutcome, RenewOutcome,
    WaitOptions,
};
use crate::error::Result;
use crate::token::LockToken;
use crate::validate::validate_key;
use crate::versioned::{CasOutcome, CreateOutcome, DeleteOutcome, Expiry, Versioned, VersionedStore};

/// Wraps a backend and puts `prefix` in front of every key, so applications
/// or tenants sharing one server cannot touch each other's locks and values
/// (`PrefixLayer::new(backend, "billing:")` turns `orders:42` into
/// `billing:orders:42` on the server). Callers still see their own keys, and
/// an empty key is still refused.
#[derive(Debug, Clone)]
pub struct PrefixLayer<B> {
    inner: B,
    prefix: String,
}

impl<B> PrefixLayer<B> {
    /// Prefix `inner`'s keys with `prefix`.
    pub fn new(inner: B, prefix: impl Into<String>) -> Self {
        PrefixLayer {
            inner,
            prefix: prefix.into(),
        }
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// Unwrap.
    pub fn into_inner(self) -> B {
        self.inner
    }

    /// The key as the server sees it.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] for an empty or oversized key.
    pub fn server_key(&self, key: &str) -> Result<String> {
        validate_key(key)?;
        let mut full = String::with_capacity(self.prefix.len() + key.len());
        full.push_str(&self.prefix);
        full.push_str(key);
        validate_key(&full)?;
        Ok(full)
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)] // a wrapper forwards every method
impl<B: LockBackend> LockBackend for PrefixLayer<B> {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        self.inner.try_acquire(&self.server_key(key)?, token, ttl).await
    }

    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        self.inner.release(&self.server_key(key)?, token).await
    }

    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        self.inner.renew(&self.server_key(key)?, token, ttl).await
    }

    async fn renew_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        let keys: Vec<Result<String>> = items.iter().map(|(key, _)| self.server_key(key)).collect();
        let valid: Vec<(&str, &LockToken)> = keys
            .iter()
            .zip(items)
            .filter_map(|(key, (_, token))| key.as_ref().ok().map(|k| (k.as_str(), *token)))
            .collect();
        let mut renewed = self.inner.renew_many(&valid, ttl).await.into_iter();
        keys.into_iter()
            .map(|key| match key {
                Ok(_) => renewed.next().unwrap_or_else(|| {
                    // A renewal whose result is missing may have happened.
                    Err(crate::Error::outcome_unknown(
                        self.inner.capabilities().name,
                        "renew_many returned too few results",
                    ))
                }),
                Err(e) => Err(e),
            })
            .collect()
    }

    async fn wait_for_release(&self, key: &str, max_wait: Duration) {
        match self.server_key(key) {
            Ok(full) => self.inner.wait_for_release(&full, max_wait).await,
            Err(_) => tokio::time::sleep(max_wait).await,
        }
    }

    async fn wait_for_release_opts(&self, key: &str, options: &WaitOptions) {
        match self.server_key(key) {
            Ok(full) => self.inner.wait_for_release_opts(&full, options).await,
            Err(_) => tokio::time::sleep(options.max_wait).await,
        }
    }

    async fn try_acquire_fair(
        &self,
        key: &str,
        token: &LockToken,
        ttl: Duration,
        waiter: &FairWaiter,
    ) -> Result<AcquireOutcome> {
        let full = self.server_key(key)?;
        self.inner.try_acquire_fair(&full, token, ttl, waiter).await
    }

    async fn wait_fair(&self, key: &str, waiter: &FairWaiter, max_wait: Duration) {
        match self.server_key(key) {
            Ok(full) => self.inner.wait_fair(&full, waiter, max_wait).await,
            Err(_) => tokio::time::sleep(max_wait).await,
        }
    }

    async fn leave_queue(&self, key: &str, waiter: &FairWaiter) -> Result<()> {
        let full = self.server_key(key)?;
        self.inner.leave_queue(&full, waiter).await
    }

    async fn inspect(&self, key: &str) -> Result<crate::LockInfo> {
        self.inner.inspect(&self.server_key(key)?).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities().without_kinds()
    }

    /// Never forwarded: every call goes through the layer (and its prefix).
    fn instant(&self) -> Option<&dyn InstantLockBackend> {
        None
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)] // a wrapper forwards every method
impl<S: VersionedStore> VersionedStore for PrefixLayer<S> {
    async fn get(&self, key: &str) -> Result<Option<Versioned>> {
        self.inner.get(&self.server_key(key)?).await
    }

    async fn create(&self, key: &str, value: &[u8], expiry: Expiry) -> Result<CreateOutcome> {
        self.inner.create(&self.server_key(key)?, value, expiry).await
    }

    async fn compare_and_set(&self, key: &str, expected: u64, value: &[u8], expiry: Expiry) -> Result<CasOutcome> {
        self.inner
            .compare_and_set(&self.server_key(key)?, expected, value, expiry)
            .await
    }

    async fn delete(&self, key: &str, expected: u64) -> Result<DeleteOutcome> {
        self.inner.delete(&self.server_key(key)?, expected).await
    }

    fn name(&self) -> &str {
        self.inner.name()
    }
}
