//! Named rules about what the admin API keeps in the store: the audit trail
//! and the deletion of a whole event.

use anteroom_core::phase::AdminState;

use super::{Store, admit, join_n};
use crate::conformance::{Ctx, HOUR_US};
use crate::{AUDIT_KEEP, MemberState, Touch};

pub(super) async fn audit_trail_is_kept_per_event(s: Store, c: Ctx) {
    let (a, b) = (c.event("audit-a"), c.event("audit-b"));
    for i in 0..3 {
        s.append_audit(&a, &format!(r#"{{"n":{i}}}"#))
            .await
            .unwrap();
    }
    s.append_audit(&b, r#"{"n":"b"}"#).await.unwrap();
    assert_eq!(
        s.audit(&a, 10).await.unwrap(),
        [r#"{"n":2}"#, r#"{"n":1}"#, r#"{"n":0}"#],
        "newest first"
    );
    assert_eq!(s.audit(&a, 2).await.unwrap().len(), 2, "limit");
    assert_eq!(s.audit(&b, 10).await.unwrap(), [r#"{"n":"b"}"#]);
    let events = s.audit_events().await.unwrap();
    assert!(events.contains(&a) && events.contains(&b), "{events:?}");
    let cap = c.event("audit-cap");
    for i in 0..AUDIT_KEEP + 5 {
        s.append_audit(&cap, &i.to_string()).await.unwrap();
    }
    let kept = s.audit(&cap, AUDIT_KEEP * 2).await.unwrap();
    assert_eq!(kept.len(), AUDIT_KEEP, "the oldest are dropped");
    assert_eq!(kept[0], (AUDIT_KEEP + 4).to_string());
}

pub(super) async fn delete_event_removes_all_but_the_audit(s: Store, c: Ctx) {
    let ev = c.event("delete");
    let ms = join_n(&s, &ev, "m", 3).await;
    admit(&s, &ev, 1, 10, HOUR_US).await;
    s.set_admin_state(&ev, AdminState::Closed).await.unwrap();
    s.put_event_config(&ev, "{}").await.unwrap();
    let anchor = s.anchor_us(&ev).await.unwrap();
    s.append_audit(&ev, r#"{"action":"delete"}"#).await.unwrap();
    s.delete_event(&ev).await.unwrap();
    for m in &ms {
        assert_eq!(
            s.status(&ev, m, Touch::Peek).await.unwrap(),
            MemberState::None
        );
    }
    let stats = s.stats(&ev).await.unwrap();
    assert_eq!(
        (stats.waiting, stats.outstanding, stats.admitted_total),
        (0, 0, 0)
    );
    assert_eq!(s.admin_state(&ev).await.unwrap(), AdminState::Running);
    assert!(
        s.event_configs()
            .await
            .unwrap()
            .iter()
            .all(|(id, _)| *id != ev)
    );
    assert_eq!(s.audit(&ev, 10).await.unwrap().len(), 1, "the trail stays");
    // The id can be used again from scratch.
    assert!(join_n(&s, &ev, "again", 1).await.len() == 1);
    // ...and counts from its own start, not the deleted event's.
    let again = s.anchor_us(&ev).await.unwrap();
    assert!(
        again > anchor,
        "anchor {anchor}, after the deletion {again}"
    );
    s.delete_event(&ev).await.unwrap();
}
