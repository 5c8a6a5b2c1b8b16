//! Head truncation: which messages a request keeps when it does not fit the context window.
//!
//! The policy (README, "Context overflow"):
//! - never dropped: system messages, messages marked `pinned`, and the last message;
//! - the other messages are the *history*; when the request does not fit, the oldest history
//!   messages are dropped, cutting at the first message boundary at or after a multiple of half the
//!   history room, counted from the start of the full history (a boundary before a user message
//!   when there is one, so that turns stay paired);
//! - *history room* = context − max_tokens − the pinned messages − the template's tail;
//! - a template that refuses the kept history (user and assistant turns that must alternate, after
//!   a pinned user message) gets the [`later_cuts`], one message further each, an assistant's turn
//!   included (`Prompter::fit`).
//!
//! Why half-room steps: a chat client resends its whole growing history every turn. Dropping just
//! enough to fit would move the cut every turn, so every turn would change the tokens after the
//! pinned prefix and recompute all of the kept history. With the cut at multiples of a fixed step,
//! consecutive requests cut at the same boundary until the kept history has grown by about half the
//! room again: one recompute per overflow, not one per turn (llama.cpp's context shift discards
//! half for the same reason). The plan depends only on the request and the context size, so a cold
//! run of the same request computes the same prompt.

use crate::error::{Error, Result};

/// What the planner needs to know of one message.
#[derive(Clone, Debug)]
pub struct Item {
    /// Tokens the message takes in the rendered prompt.
    pub tokens: usize,
    /// System or pinned: never dropped.
    pub pinned: bool,
    pub is_user: bool,
}

/// Indices of the messages to keep, in order, and how many were dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub keep: Vec<usize>,
    pub dropped: usize,
}

/// Plans which messages fit in `room` tokens (context − max_tokens), with `tail` tokens the template
/// adds after the last message. `extra_steps` moves the cut further by whole steps (for when the
/// re-rendered prompt came out longer than the per-message counts promised).
pub fn plan(items: &[Item], tail: usize, room: usize, extra_steps: usize) -> Result<Plan> {
    let n = items.len();
    let total: usize = items.iter().map(|m| m.tokens).sum::<usize>() + tail;
    if n == 0 || (total <= room && extra_steps == 0) {
        return Ok(Plan { keep: (0..n).collect(), dropped: 0 });
    }
    // The last message is never dropped, but it counts as history: that keeps the step (half the
    // history room) independent of how long this turn's question is.
    let fixed: usize = items.iter().filter(|m| m.pinned).map(|m| m.tokens).sum::<usize>() + tail;
    let history: Vec<usize> = (0..n).filter(|&i| !items[i].pinned).collect();
    let last_cost = if items[n - 1].pinned { 0 } else { items[n - 1].tokens };
    if fixed + last_cost > room {
        return Err(Error::ContextFull { needed: fixed + last_cost, capacity: room });
    }
    let room_h = room - fixed;
    let step = (room_h / 2).max(1);
    let t: usize = history.iter().map(|&i| items[i].tokens).sum();
    let needed = t.saturating_sub(room_h);
    let target = (needed.div_ceil(step) + extra_steps) * step;
    // Offsets of history boundaries from the start of the full history.
    let mut offset = 0;
    let mut cut = None;
    let last_h = history.len().saturating_sub(if items[n - 1].pinned { 0 } else { 1 });
    for (j, &i) in history.iter().enumerate() {
        if offset >= target && offset >= needed && (items[i].is_user || j == last_h) {
            cut = Some(j);
            break;
        }
        if j == last_h {
            break;
        }
        offset += items[i].tokens;
    }
    // No user boundary in reach: cut just before the last message (the most that may go).
    let cut = match cut {
        Some(c) => c,
        None => last_h,
    };
    let dropped: Vec<usize> = history[..cut].to_vec();
    let keep: Vec<usize> = (0..n).filter(|i| !dropped.contains(i)).collect();
    Ok(Plan { dropped: dropped.len(), keep })
}

/// The plans that drop more history than `plan` does, in order: the kept history starting at each
/// later message for which `may_start` holds (and at last at the last message). For a template
/// that refuses `plan`'s kept history (one that requires alternating roles, after a pinned user
/// message): the first of these it renders is the cut.
/// Lazy: each plan is built when it is tried (a request may have thousands of messages).
pub fn later_cuts<'a>(items: &'a [Item], plan: &Plan, may_start: impl Fn(usize) -> bool + 'a) -> impl Iterator<Item = Plan> + 'a {
    let n = items.len();
    let history: Vec<usize> = (0..n).filter(|&i| !items[i].pinned).collect();
    let last_h = match items.last() {
        Some(last) => history.len().saturating_sub(if last.pinned { 0 } else { 1 }),
        None => 0,
    };
    let first = if n == 0 { 1 } else { plan.dropped + 1 };
    (first..=last_h).filter_map(move |j| {
        if j != last_h && !history.get(j).is_some_and(|&i| may_start(i)) {
            return None;
        }
        // History is in message order: the first j history messages are dropped.
        let cut = history.get(j).copied().unwrap_or(n);
        Some(Plan { keep: (0..n).filter(|&i| items[i].pinned || i >= cut).collect(), dropped: j })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(turns: usize, turn_tokens: usize) -> Vec<Item> {
        let mut v = vec![Item { tokens: 100, pinned: true, is_user: false }];
        for i in 0..turns {
            v.push(Item { tokens: turn_tokens, pinned: false, is_user: i % 2 == 0 });
        }
        v
    }

    #[test]
    fn fits_means_nothing_dropped() {
        let p = plan(&chat(4, 10), 5, 200, 0).unwrap();
        assert_eq!(p, Plan { keep: vec![0, 1, 2, 3, 4], dropped: 0 });
    }

    /// A growing chat: the cut stays put between overflows, the pinned message is never dropped,
    /// the kept prompt always fits, and overflows are rare.
    #[test]
    fn cuts_are_stable_as_the_history_grows() {
        let room = 600;
        let mut last_cut = 0;
        let mut cut_changes = 0;
        for turns in 1..120 {
            let items = chat(turns, 17);
            let p = plan(&items, 5, room, 0).unwrap();
            assert_eq!(p.keep[0], 0, "the pinned system message stays");
            assert_eq!(*p.keep.last().unwrap(), turns, "the last message stays");
            let kept: usize = p.keep.iter().map(|&i| items[i].tokens).sum::<usize>() + 5;
            assert!(kept <= room, "{turns} turns: {kept} tokens kept for a room of {room}");
            assert!(p.dropped >= last_cut, "the cut never moves back");
            if p.dropped != last_cut {
                cut_changes += 1;
                // After a cut the first kept history message is a user turn.
                assert!(items[p.keep[1]].is_user);
            }
            last_cut = p.dropped;
        }
        // 119 turns of 17 tokens through a history room of 495: one cut per ~250 tokens of growth.
        assert!((5..=10).contains(&cut_changes), "{cut_changes} overflows");
    }

    #[test]
    fn too_big_to_fit_is_an_error() {
        let items = vec![Item { tokens: 500, pinned: true, is_user: false }, Item { tokens: 200, pinned: false, is_user: true }];
        assert!(matches!(plan(&items, 5, 600, 0), Err(Error::ContextFull { .. })));
    }

    #[test]
    fn pinned_messages_in_the_middle_stay() {
        let mut items = chat(10, 50);
        items[3].pinned = true;
        let p = plan(&items, 0, 400, 0).unwrap();
        assert!(p.keep.contains(&3) && p.dropped > 0);
    }

    #[test]
    fn later_cuts_drop_more_at_each_allowed_start() {
        let items = chat(6, 10); // pinned, then user, assistant, user, assistant, user, assistant
        let p = Plan { keep: vec![0, 3, 4, 5, 6], dropped: 2 };
        let later: Vec<Vec<usize>> = later_cuts(&items, &p, |i| i % 2 == 0).map(|p| p.keep).collect();
        assert_eq!(later, [vec![0, 4, 5, 6], vec![0, 6]], "before each assistant turn (even items), then the last message alone");
    }

    #[test]
    fn the_plan_depends_only_on_the_request() {
        let items = chat(40, 23);
        assert_eq!(plan(&items, 7, 500, 0).unwrap(), plan(&items, 7, 500, 0).unwrap());
        assert!(plan(&items, 7, 500, 1).unwrap().dropped > plan(&items, 7, 500, 0).unwrap().dropped);
    }
}
