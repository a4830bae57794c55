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
