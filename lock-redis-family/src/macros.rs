//! [`crate::family_config!`]: the configuration contract on a backend
//! crate's config type (the grammar is [`crate::url`]).
//!
//! [`crate::kind_backends!`]: the lock kinds' traits of a backend, one call
//! per method to [`crate::kinds`]' functions. A blanket implementation over
//! [`crate::kinds::scripted::ScriptedKinds`] is not possible (the traits and
//! the backends are other crates'), so each backend invokes the macro once.

/// Implements `RwLockBackend`, `SemaphoreBackend`, `MultiLockBackend` and
/// `ElectionBackend` (of `lock_core`) for `$backend`, which implements
/// `lock_core::LockBackend` and
/// [`ScriptedKinds`](crate::kinds::scripted::ScriptedKinds): each method is
/// the matching function of [`crate::kinds`]'s `rw`, `semaphore`, `multi`
/// and `election` modules, and the leader's reads are
/// [`ScriptedKinds::read_leader`](crate::kinds::scripted::ScriptedKinds::read_leader)
/// and
/// [`ScriptedKinds::wait_for_leader`](crate::kinds::scripted::ScriptedKinds::wait_for_leader).
///
/// A backend invokes it once, beside its `ScriptedKinds` implementation:
/// `lock_redis_family::kind_backends!(RedisLuaBackend);` (both of this
/// family's backends do, and their test suites run every kind through it).
#[macro_export]
macro_rules! kind_backends {
    ($backend:ty) => {
        #[$crate::__private::lock_core::raw::async_trait]
        impl $crate::__private::lock_core::raw::RwLockBackend for $backend {
            async fn try_acquire_rw(
                &self,
                name: &str,
                mode: $crate::__private::lock_core::RwMode,
                waiting: bool,
                token: &$crate::__private::lock_core::LockToken,
                ttl: ::std::time::Duration,
            ) -> $crate::__private::lock_core::Result<$crate::__private::lock_core::AcquireOutcome> {
                $crate::kinds::rw::try_acquire(self, name, mode, waiting, token, ttl).await
            }

            async fn release_rw(
                &self,
                name: &str,
                token: &$crate::__private::lock_core::LockToken,
            ) -> $crate::__private::lock_core::Result<$crate::__private::lock_core::ReleaseOutcome> {
                $crate::kinds::rw::release(self, name, token).await
            }

            async fn renew_rw(
                &self,
                name: &str,
                token: &$crate::__private::lock_core::LockToken,
                ttl: ::std::time::Duration,
            ) -> $crate::__private::lock_core::Result<$crate::__private::lock_core::RenewOutcome> {
                $crate::kinds::rw::renew(self, name, token, ttl).await
            }

            async fn upgrade_rw(
                &self,
                name: &str,
                token: &$crate::__private::lock_core::LockToken,
                ttl: ::std::time::Duration,
            ) -> $crate::__private::lock_core::Result<$crate::__private::lock_core::AcquireOutcome> {
                $crate::kinds::rw::upgrade(self, name, token, ttl).await
            }

            async fn downgrade_rw(
                &self,
                name: &str,
                token: &$crate::__private::lock_core::LockToken,
                ttl: ::std::time::Duration,
            ) -> $crate::__private::lock_core::Result<$crate::__private::lock_core::AcquireOutcome> {
                $crate::kinds::rw::downgrade(self, name, token, ttl).await
            }

            async fn inspect_rw(
                &self,
                name: &str,
            ) -> $crate::__private::lock_core::Result<$crate::__private::lock_core::RwInfo> {
                $crate::kinds::inspect::rw(self, name).await
            }
        }

        #[$crate::__private::lock_core::raw::async_trait]
        impl $crate::__private::lock_core::raw::SemaphoreBackend for $backend {
            async fn acquire_permits(
                &self,
                name: &str,
                holder: &$crate::__private::lock_core::LockToken,
                request: $crate::__private::lock_core::raw::PermitRequest,
                ttl: ::std::time::Duration,
            ) -> $crate::__private::lock_core::Result<$crate::__private::lock_core::AcquireOutcome> {
                $crate::kinds::semaphore::acquire(self, name, holder, request, ttl).await
            }

            async fn release_permits(
                &self,
                name: &str,
                holder: &$crate::__private::lock_core::LockToken,
            ) -> $crate::__private::lock_core::Result<$crate::__private::lock_core::ReleaseOutcome> {
                $crate::kinds::semaphore::release(self, name, holder).await
            }

            async fn renew_permits(
                &self,
                name: &str,
                holder: &$crate::__private::lock_core::LockToken,
                ttl: ::std::time::Duration,
            ) -> $crate::__private::lock_core::Result<$crate::__private::lock_core::RenewOutcome> {
                $crate::kinds::semaphore::renew(self, name, holder, ttl).await
            }

            async fn inspect_permits(
                &self,
                name: &str,
            ) -> $crate::__private::lock_core::Result<$crate::__private::lock_core::PermitsInfo> {
                $crate::kinds::inspect::semaphore(self, name).await
            }
        }

        #[$crate::__private::lock_core::raw::async_trait]
        impl $crate::__private::lock_core::raw::MultiLockBackend for $backend {
            async fn try_acquire_all(
                &self,
                set: &[&str],
                token: &$crate::__private::lock_core::LockToken,
                ttl: ::std::time::Duration,
            ) -> $crate::__private::lock_core::Result<$crate::__private::lock_core::AcquireOutcome> {
                $crate::kinds::multi::try_acquire_all(self, set, token, ttl).await
            }

            async fn release_all(
                &self,
                set: &[&str],
                token: &$crate::__private::lock_core::LockToken,
            ) -> $crate::__private::lock_core::Result<$crate::__private::lock_core::ReleaseOutcome> {
                $crate::kinds::multi::release_all(self, set, token).await
            }

            async fn renew_all(
                &self,
                set: &[&str],
                token: &$crate::__private::lock_core::LockToken,
                ttl: ::std::time::Duration,
            ) -> $crate::__private::lock_core::Result<$crate::__private::lock_core::RenewOutcome> {
                $crate::kinds::multi::renew_all(self, set, token, ttl).await
            }
        }

        #[$crate::__private::lock_core::raw::async_trait]
        impl $crate::__private::lock_core::raw::ElectionBackend for $backend {
            async fn try_lead(
                &self,
                name: &str,
                token: &$crate::__private::lock_core::LockToken,
                identity: &[u8],
                ttl: ::std::time::Duration,
            ) -> $crate::__private::lock_core::Result<$crate::__private::lock_core::AcquireOutcome> {
                $crate::kinds::election::try_lead(self, name, token, identity, ttl).await
            }

            async fn resign(
                &self,
                name: &str,
                token: &$crate::__private::lock_core::LockToken,
            ) -> $crate::__private::lock_core::Result<$crate::__private::lock_core::ReleaseOutcome> {
                $crate::kinds::election::resign(self, name, token).await
            }

            async fn renew_lead(
                &self,
                name: &str,
                token: &$crate::__private::lock_core::LockToken,
                ttl: ::std::time::Duration,
            ) -> $crate::__private::lock_core::Result<$crate::__private::lock_core::RenewOutcome> {
                $crate::kinds::election::renew(self, name, token, ttl).await
            }

            async fn leader(
                &self,
                name: &str,
            ) -> $crate::__private::lock_core::Result<Option<$crate::__private::lock_core::LeaderInfo>> {
                $crate::kinds::scripted::ScriptedKinds::read_leader(self, name).await
            }

            async fn wait_for_leader_change(
                &self,
                name: &str,
                seen: Option<&$crate::__private::lock_core::LeaderInfo>,
                max_wait: ::std::time::Duration,
            ) {
                $crate::kinds::scripted::ScriptedKinds::wait_for_leader(self, name, seen, max_wait).await;
            }
        }
    };
}

/// Implements the configuration contract for a backend crate's config type
/// (a newtype over [`FamilyConfig`](crate::url::FamilyConfig)): `BackendConfig`, `Default`, `Deref`,
/// and `serde` where the crate enables it. A macro, as the two crates'
/// types must be their own (the contract's trait is foreign to both).
#[macro_export]
macro_rules! family_config {
    ($config:ident, $flavor:expr, [$($scheme:literal),+]) => {
        impl ::std::default::Default for $config {
            fn default() -> Self {
                $config($crate::url::FamilyConfig::defaults($flavor))
            }
        }

        impl ::std::ops::Deref for $config {
            type Target = $crate::url::FamilyConfig;
            fn deref(&self) -> &Self::Target {
                &self.0
            }
        }

        impl ::std::ops::DerefMut for $config {
            fn deref_mut(&mut self) -> &mut Self::Target {
                &mut self.0
            }
        }

        impl $crate::__private::lock_core::raw::BackendConfig for $config {
            const SCHEMES: &'static [&'static str] = &[$($scheme),+];
            const PARAMS: &'static [&'static str] = $crate::url::FAMILY_PARAMS;

            fn from_url(url: &str) -> $crate::__private::lock_core::Result<Self> {
                $crate::url::FamilyConfig::parse(url, $flavor)
                    .map($config)
                    .map_err(|e| $crate::__private::lock_core::raw::hide_quoted_url_text(e, url))
            }

            fn set(&mut self, key: &str, value: &str) -> $crate::__private::lock_core::Result<()> {
                self.0.set(key, value)
            }

            fn validate(&self) -> $crate::__private::lock_core::Result<()> {
                self.0.validate()
            }

            fn description(&self) -> String {
                self.0.description()
            }
        }
    };
}
