//! What each key does: `q` (or Ctrl-C) quits, `s` changes the sort, `/` filters, the arrows move the
//! selection, `p` pauses a replay and `+`/`-` change its speed. Kept apart from the terminal so that a test
//! can press keys.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use roce_core::filter::Filter;

/// How the flows are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sort {
    /// Fastest first.
    #[default]
    Rate,
    /// Most CNPs first.
    Cnps,
    /// Most CE-marked first.
    Ce,
    /// Lowest model rate first: the senders DCQCN holds back most.
    Model,
    /// By sender, receiver and QP.
    Flow,
}

impl Sort {
    /// The next order `s` switches to.
    pub fn next(self) -> Sort {
        match self {
            Sort::Rate => Sort::Cnps,
            Sort::Cnps => Sort::Ce,
            Sort::Ce => Sort::Model,
            Sort::Model => Sort::Flow,
            Sort::Flow => Sort::Rate,
        }
    }

    /// Its name in the header.
    pub fn name(self) -> &'static str {
        match self {
            Sort::Rate => "rate",
            Sort::Cnps => "CNPs",
            Sort::Ce => "CE",
            Sort::Model => "model (lowest first)",
            Sort::Flow => "flow",
        }
    }
}

/// What the screen remembers between frames.
#[derive(Debug, Default)]
pub struct Ui {
    /// The flows' order.
    pub sort: Sort,
    /// The selected row, among the flows listed.
    pub selected: usize,
    /// The filter being typed after `/`, if it is.
    pub typing: Option<String>,
    /// A line for the status bar (a filter that does not parse).
    pub message: Option<String>,
}

/// What a key asks of the event loop.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Nothing beyond the screen's own state.
    None,
    /// Leave.
    Quit,
    /// Pause or resume the replay.
    Pause,
    /// Multiply the replay's speed.
    Speed(f64),
    /// Set (or, with `None`, clear) the filter.
    Filter(Option<(String, Filter)>),
}

impl Ui {
    /// Handles one key; `rows` is how many flows are listed, for the selection's bounds.
    pub fn key(&mut self, k: KeyEvent, rows: usize) -> Action {
        if k.kind == KeyEventKind::Release {
            return Action::None;
        }
        if k.modifiers.contains(KeyModifiers::CONTROL) && k.code == KeyCode::Char('c') {
            return Action::Quit;
        }
        if let Some(text) = self.typing.as_mut() {
            match k.code {
                KeyCode::Esc => self.typing = None,
                KeyCode::Backspace => {
                    text.pop();
                }
                KeyCode::Char(c) => text.push(c),
                KeyCode::Enter => {
                    let text = self.typing.take().unwrap_or_default();
                    let text = text.trim();
                    if text.is_empty() {
                        self.message = None;
                        return Action::Filter(None);
                    }
                    return match text.parse::<Filter>() {
                        Ok(f) => {
                            self.message = None;
                            self.selected = 0;
                            Action::Filter(Some((text.to_string(), f)))
                        }
                        Err(e) => {
                            self.message =
                                Some(format!("{e} (in {text:?}); the filter is unchanged"));
                            Action::None
                        }
                    };
                }
                _ => {}
            }
            return Action::None;
        }
        let last = rows.saturating_sub(1);
        match k.code {
            KeyCode::Char('q') | KeyCode::Char('Q') => return Action::Quit,
            KeyCode::Char('s') => self.sort = self.sort.next(),
            KeyCode::Char('/') => {
                self.typing = Some(String::new());
                self.message = None;
            }
            KeyCode::Char('p') | KeyCode::Char(' ') => return Action::Pause,
            KeyCode::Char('+') | KeyCode::Char('=') => return Action::Speed(2.0),
            KeyCode::Char('-') => return Action::Speed(0.5),
            KeyCode::Up | KeyCode::Char('k') => self.selected = self.selected.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => self.selected = (self.selected + 1).min(last),
            KeyCode::PageUp => self.selected = self.selected.saturating_sub(10),
            KeyCode::PageDown => self.selected = (self.selected + 10).min(last),
            KeyCode::Home => self.selected = 0,
            KeyCode::End => self.selected = last,
            KeyCode::Esc => self.message = None,
            _ => {}
        }
        Action::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn press(ui: &mut Ui, code: KeyCode, rows: usize) -> Action {
        ui.key(KeyEvent::new(code, KeyModifiers::NONE), rows)
    }

    #[test]
    fn keys_do_what_the_help_line_says() {
        let mut ui = Ui::default();
        assert_eq!(press(&mut ui, KeyCode::Char('q'), 3), Action::Quit);
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(ui.key(ctrl_c, 3), Action::Quit);
        press(&mut ui, KeyCode::Char('s'), 3);
        assert_eq!(ui.sort, Sort::Cnps);
        assert_eq!(press(&mut ui, KeyCode::Char('+'), 3), Action::Speed(2.0));
        assert_eq!(press(&mut ui, KeyCode::Char('-'), 3), Action::Speed(0.5));
        assert_eq!(press(&mut ui, KeyCode::Char('p'), 3), Action::Pause);
        for _ in 0..5 {
            press(&mut ui, KeyCode::Down, 3);
        }
        assert_eq!(ui.selected, 2, "the selection stays on the last row");
        press(&mut ui, KeyCode::Up, 3);
        assert_eq!(ui.selected, 1);
        // A filter: typed, a mistake refused with a message, then one that parses, then cleared.
        press(&mut ui, KeyCode::Char('/'), 3);
        for c in "src ==".chars() {
            press(&mut ui, KeyCode::Char(c), 3);
        }
        assert_eq!(press(&mut ui, KeyCode::Enter, 3), Action::None);
        assert!(
            ui.message
                .as_deref()
                .is_some_and(|m| m.contains("unchanged"))
        );
        press(&mut ui, KeyCode::Char('/'), 3);
        for c in "cnp or ip == 10.0.0.1".chars() {
            press(&mut ui, KeyCode::Char(c), 3);
        }
        // `q` while typing is a letter, not a quit.
        assert_eq!(press(&mut ui, KeyCode::Char('q'), 3), Action::None);
        press(&mut ui, KeyCode::Backspace, 3);
        match press(&mut ui, KeyCode::Enter, 3) {
            Action::Filter(Some((text, _))) => assert_eq!(text, "cnp or ip == 10.0.0.1"),
            other => panic!("{other:?}"),
        }
        press(&mut ui, KeyCode::Char('/'), 3);
        assert_eq!(press(&mut ui, KeyCode::Enter, 3), Action::Filter(None));
    }
}
