//! The macros that expand the conformance cases into one `#[tokio::test]`
//! each, on the runtime a backend's suite asks for.

/// Expands to one `#[tokio::test]` per lock case. The first argument is
/// the runtime:
///
/// - `paused`: tokio's paused clock on a current-thread runtime (in-process
///   backends);
/// - `real`: real time on a multi-threaded runtime with two workers;
/// - `real, flavor = multi_thread` (the same) or
///   `real, flavor = current_thread`: real time on the runtime flavour the
///   caller picks (a backend that must also work on a current-thread
///   runtime runs its suite there).
///
/// The last is an expression of type `impl Future<Output = LockSuite>`:
///
/// ```text
/// lock_testkit::lock_conformance!(real, flavor = current_thread, lock_suite());
/// ```
#[macro_export]
macro_rules! lock_conformance {
    ($($args:tt)*) => {
        $crate::__conformance_runtime!([lock_cases:
            exclusive_acquire, try_lock_never_waits, non_owner_is_refused, expiry_then_reacquire,
            stale_holder_cannot_release_or_renew, extend_keeps_lock_past_ttl, auto_renew_keeps_lock,
            lost_fires_when_key_is_taken, lost_fires_by_deadline_when_backend_hangs,
            with_lock_cancels_body_on_loss, with_lock_returns_body_output, drop_releases_promptly,
            lock_times_out_while_held, counter_is_exact_under_lock, fencing_tokens_increase,
            unknown_outcome_acquire_is_cleaned_up, invalid_arguments_are_rejected, renew_many_matches_renew,
            lost_follows_an_earlier_deadline, handles_see_the_lease_end,
            dropped_acquire_leaves_no_lock,
            unrenewed_lease_expires_while_another_is_renewed,
            dropped_release_future_still_releases, reserved_keys_are_refused,
            reserved_keys_are_refused_by_renew_many,
            outside_a_runtime_is_a_typed_error_and_leaves_no_key]; $($args)*);
        $crate::__conformance_runtime!([inspect_cases:
            inspect_reports_free_and_held, inspect_leaves_the_fencing_counter_alone,
            inspect_does_not_delay_a_waiter, inspect_leaves_the_fair_queue_alone]; $($args)*);
        $crate::__conformance_runtime!([min_hold_cases:
            early_release_keeps_the_key_until_the_minimum_hold, with_lock_keeps_the_key_until_the_minimum_hold,
            dropped_guard_keeps_the_key_until_the_minimum_hold,
            release_after_the_minimum_hold_frees_the_key]; $($args)*);
    };
}

/// Expands to one `#[tokio::test]` per fair-mode lock case (see
/// [`lock_conformance!`] for the arguments; the same `LockSuite`). On a
/// backend without a fair queue each case checks the typed refusal.
#[macro_export]
macro_rules! fair_conformance {
    ($($args:tt)*) => {
        $crate::__conformance_runtime!([fair_cases:
            fair_waiters_are_served_in_order, dead_waiter_holds_the_queue_up_for_its_claim_only,
            cancelled_fair_waiter_leaves_the_queue, fair_mutual_exclusion_under_32_tasks]; $($args)*);
    };
}

/// Expands to one `#[tokio::test]` per batched-renewal case of a
/// script-based Redis backend (see [`lock_conformance!`] for the arguments;
/// the suite is a [`RenewManySuite`](crate::RenewManySuite); real servers, so `real` only).
#[cfg(feature = "harness")]
#[macro_export]
macro_rules! renew_many_conformance {
    ($($args:tt)*) => {
        $crate::__conformance_runtime!([renew_many_cases:
            renew_many_on_a_server_gives_per_key_outcomes_in_one_script_call,
            renew_many_after_a_script_flush_reloads_the_script, a_failed_call_fails_every_item_of_the_batch,
            renew_many_on_a_cluster_sends_one_call_per_slot]; $($args)*);
    };
}

/// Expands to one `#[tokio::test]` per versioned-store case (see
/// [`lock_conformance!`] for the arguments).
#[macro_export]
macro_rules! versioned_conformance {
    ($($args:tt)*) => {
        $crate::__conformance_runtime!([versioned_cases:
            missing_key, create_race_has_one_winner, stale_cas_returns_current, cas_round_trip,
            update_increments_are_exact, delete_if_version, no_aba_after_delete, ttl_on_writes,
            binary_values, invalid_arguments_are_rejected, update_from_corrects_a_stale_start]; $($args)*);
    };
}

/// Expands to one `#[tokio::test]` per semaphore case (see
/// [`lock_conformance!`] for the arguments).
#[macro_export]
macro_rules! semaphore_conformance {
    ($($args:tt)*) => {
        $crate::__conformance_runtime!([semaphore_cases:
            bound_never_exceeded, try_acquire_never_waits, expiry_returns_dead_holders_permits,
            stale_holder_cannot_release_or_renew, release_before_acquire_refuses_the_late_acquire,
            size_mismatch_is_an_error, invalid_requests_are_rejected,
            auto_renew_keeps_permits, drop_returns_permits, lost_fires_by_deadline_when_backend_hangs,
            with_permits_returns_output, fencing_tokens_increase,
            names_with_and_without_a_hash_tag_are_separate,
            multi_permit_waiter_completes_under_single_permit_churn,
            two_permit_waiters_complete_under_single_permit_churn, reserved_semaphore_names_are_refused]; $($args)*);
        $crate::__conformance_runtime!([semaphore_token_cases:
            refreshed_holder_gets_its_own_fencing_token]; $($args)*);
        $crate::__conformance_runtime!([semaphore_inspect_cases:
            inspect_counts_live_permits]; $($args)*);
    };
}

/// Expands to one `#[tokio::test]` per multi-key lock case (see
/// [`lock_conformance!`] for the arguments).
#[macro_export]
macro_rules! multi_conformance {
    ($($args:tt)*) => {
        $crate::__conformance_runtime!([multi_cases:
            no_key_held_twice, all_or_nothing, excludes_plain_locks, expiry_returns_dead_holders_keys,
            stale_holder_cannot_release_or_renew, lost_fires_by_deadline_when_backend_hangs,
            invalid_key_sets_are_rejected, with_locks_returns_output,
            fencing_tokens_order_writes_per_key, reserved_multi_keys_are_refused]; $($args)*);
    };
}

/// Expands to one `#[tokio::test]` per read-write lock case (see
/// [`lock_conformance!`] for the arguments).
#[macro_export]
macro_rules! rw_conformance {
    ($($args:tt)*) => {
        $crate::__conformance_runtime!([rw_cases:
            one_writer_or_many_readers, readers_share, writer_excludes_everyone,
            waiting_writer_holds_new_readers_back, expiry_returns_dead_holders_lock,
            stale_holder_cannot_release_or_renew, lost_fires_by_deadline_when_backend_hangs,
            with_rw_returns_output, names_with_and_without_a_hash_tag_are_separate,
            writers_complete_under_a_stream_of_readers, writer_fencing_tokens_increase,
            reserved_rw_names_are_refused]; $($args)*);
        $crate::__conformance_runtime!([upgrade_cases:
            one_upgradeable_reader_at_a_time, writer_waits_while_the_upgrader_reads,
            upgrade_waits_for_readers_then_excludes_everyone, upgrade_goes_before_a_waiting_writer,
            downgrade_lets_readers_in_but_no_writer, lost_upgradeable_read_cannot_upgrade,
            lost_upgradeable_guard_refuses_to_upgrade, upgraders_and_writers_never_overlap]; $($args)*);
        $crate::__conformance_runtime!([rw_inspect_cases:
            inspect_reports_readers_and_writer]; $($args)*);
    };
}

/// Expands to one `#[tokio::test]` per leader-election case (see
/// [`lock_conformance!`] for the arguments).
#[macro_export]
macro_rules! election_conformance {
    ($($args:tt)*) => {
        $crate::__conformance_runtime!([election_cases:
            one_leader_at_a_time, leader_reads_identity_and_term, every_observer_sees_the_change,
            expiry_hands_over, stale_leader_cannot_resign_or_renew, lost_fires_by_deadline_when_backend_hangs,
            invalid_campaigns_are_rejected, names_with_and_without_a_hash_tag_are_separate,
            reserved_election_names_are_refused]; $($args)*);
    };
}

/// Maps a conformance macro's runtime arguments to the `#[tokio::test]`
/// attribute of its cases (`$cases`: `[module: case, ...]`). The `flavor`
/// arms come first: `flavor = x` also parses as an expression.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_runtime {
    ($cases:tt; real, flavor = current_thread, $suite:expr) => {
        $crate::__conformance_cases!((flavor = "current_thread"), $suite, $cases);
    };
    ($cases:tt; real, flavor = multi_thread, $suite:expr) => {
        $crate::__conformance_cases!((flavor = "multi_thread", worker_threads = 2), $suite, $cases);
    };
    ($cases:tt; real, $suite:expr) => {
        $crate::__conformance_runtime!($cases; real, flavor = multi_thread, $suite);
    };
    ($cases:tt; paused, $suite:expr) => {
        $crate::__conformance_cases!((start_paused = true), $suite, $cases);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_cases {
    ($attr:tt, $suite:expr, [$module:ident: $($case:ident),* $(,)?]) => {
        $(
            #[tokio::test $attr]
            async fn $case() {
                let suite = $suite.await;
                $crate::conformance::$module::$case(&suite).await;
            }
        )*
    };
}
