//! `rocemon top` on a terminal: a full-screen view (ratatui over crossterm) that fits the
//! terminal and follows its resizes. A header with the host's totals, tabs for the views
//! (flows, findings, ECMP, lossless, training, switches), the flow table sortable by any
//! column, and the keys on the last line. The agent is read in a thread of its own, so the
//! keys answer at once however slow the agent is.

use super::plain;
use super::rows::{
    counts_line, finding_lines, flow_rows, rates_line, verdict_line, Docs, FlowRow, Sort,
    COLUMN_KEY,
};
use anyhow::Result;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Text};
use ratatui::widgets::{Cell, Paragraph, Row, Table, TableState, Tabs, Wrap};
use ratatui::Frame;
use std::sync::mpsc;
use std::time::Duration;

/// The views, in the order of their keys (1..).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    Flows,
    Findings,
    Ecmp,
    Lossless,
    Training,
    Switches,
}

impl View {
    const ALL: [View; 6] = [
        View::Flows,
        View::Findings,
        View::Ecmp,
        View::Lossless,
        View::Training,
        View::Switches,
    ];

    fn title(self) -> &'static str {
        match self {
            View::Flows => "Flows",
            View::Findings => "Findings",
            View::Ecmp => "ECMP",
            View::Lossless => "Lossless",
            View::Training => "Training",
            View::Switches => "Switches",
        }
    }

    fn index(self) -> usize {
        View::ALL.iter().position(|v| *v == self).unwrap_or(0)
    }
}

/// What the screen shows and how; changed by keys and by each refresh.
pub struct Ui {
    pub docs: Docs,
    pub view: View,
    pub sort: Sort,
    pub reverse: bool,
    /// The first line shown of a text view, or the selected flow.
    pub scroll: u16,
    pub table: TableState,
    /// The last refresh's failure (the agent went away), shown until one succeeds.
    pub error: Option<String>,
    pub addr: String,
}

/// What a key asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    Quit,
    Redraw,
    None,
}

impl Ui {
    pub fn new(docs: Docs, addr: &str) -> Ui {
        Ui {
            docs,
            view: View::Flows,
            sort: Sort::Rate,
            reverse: false,
            scroll: 0,
            table: TableState::default(),
            error: None,
            addr: addr.to_string(),
        }
    }

    /// Applies one key.
    pub fn key(&mut self, code: KeyCode, mods: KeyModifiers) -> Action {
        match code {
            KeyCode::Char('q') | KeyCode::Esc => return Action::Quit,
            KeyCode::Char('c') if mods.contains(KeyModifiers::CONTROL) => return Action::Quit,
            KeyCode::Char(c @ '1'..='6') => {
                self.view = View::ALL[(c as u8 - b'1') as usize];
                self.scroll = 0;
            }
            KeyCode::Tab | KeyCode::Right => {
                self.view = View::ALL[(self.view.index() + 1) % View::ALL.len()];
                self.scroll = 0;
            }
            KeyCode::BackTab | KeyCode::Left => {
                self.view = View::ALL[(self.view.index() + View::ALL.len() - 1) % View::ALL.len()];
                self.scroll = 0;
            }
            KeyCode::Char('s') => self.sort = self.sort.next(),
            KeyCode::Char('r') => self.reverse = !self.reverse,
            KeyCode::Down | KeyCode::Char('j') => self.scroll = self.scroll.saturating_add(1),
            KeyCode::Up | KeyCode::Char('k') => self.scroll = self.scroll.saturating_sub(1),
            KeyCode::PageDown => self.scroll = self.scroll.saturating_add(10),
            KeyCode::PageUp => self.scroll = self.scroll.saturating_sub(10),
            KeyCode::Home => self.scroll = 0,
            _ => return Action::None,
        }
        Action::Redraw
    }

    /// Draws the whole screen into `f`'s area.
    pub fn draw(&mut self, f: &mut Frame) {
        // The answer first: the verdict, then the most severe findings with their age.
        let findings = finding_lines(&self.docs, 3);
        let key_rows = u16::from(self.view == View::Flows);
        let [title, totals, verdict, top_findings, tabs, body, column_key, keys] =
            Layout::vertical([
                Constraint::Length(1),
                Constraint::Length(1),
                Constraint::Length(1),
                Constraint::Length(findings.len() as u16),
                Constraint::Length(1),
                Constraint::Fill(1),
                Constraint::Length(key_rows),
                Constraint::Length(1),
            ])
            .areas(f.area());
        let bold = Style::new().add_modifier(Modifier::BOLD);
        let status = match &self.error {
            Some(e) => Line::styled(
                format!("rocemon top  {}  {e}", self.addr),
                Style::new().fg(Color::Red),
            ),
            None => Line::styled(
                format!("rocemon top  {}  {}", self.addr, counts_line(&self.docs)),
                bold,
            ),
        };
        f.render_widget(Paragraph::new(status), title);
        f.render_widget(Paragraph::new(rates_line(&self.docs)), totals);
        f.render_widget(
            Paragraph::new(verdict_line(&self.docs).unwrap_or_default()),
            verdict,
        );
        let severe = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
        let lines: Vec<Line> = findings
            .into_iter()
            .map(|l| {
                if l.starts_with("critical") || l.starts_with("warning") {
                    Line::styled(l, severe)
                } else {
                    Line::raw(l)
                }
            })
            .collect();
        f.render_widget(Paragraph::new(lines), top_findings);
        f.render_widget(
            Paragraph::new(Line::styled(COLUMN_KEY, Style::new().fg(Color::DarkGray))),
            column_key,
        );
        let titles = View::ALL
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{} {}", i + 1, v.title()));
        f.render_widget(
            Tabs::new(titles)
                .select(self.view.index())
                .highlight_style(Style::new().add_modifier(Modifier::REVERSED)),
            tabs,
        );
        match self.view {
            View::Flows => self.draw_flows(f, body),
            v => {
                let mut s = String::new();
                let d = &self.docs;
                match v {
                    View::Findings => plain::render_findings(&mut s, &d.findings, d.now_s, "", ""),
                    View::Ecmp => plain::render_ecmp(&mut s, &d.ecmp, "", ""),
                    View::Lossless => plain::render_lossless(&mut s, &d.lossless, "", ""),
                    View::Training => plain::render_training(&mut s, &d.training, "", ""),
                    _ => plain::render_sflow(&mut s, &d.sflow, "", ""),
                }
                let text = s.trim_start_matches('\n');
                let text = if text.is_empty() {
                    format!("Nothing to show in {} yet.", v.title())
                } else {
                    text.to_string()
                };
                let lines = text.lines().count() as u16;
                self.scroll = self.scroll.min(lines.saturating_sub(1));
                f.render_widget(
                    Paragraph::new(Text::from(text))
                        .wrap(Wrap { trim: false })
                        .scroll((self.scroll, 0)),
                    body,
                );
            }
        }
        let keys_line = format!(
            "q quit  1-6/Tab view  s sort: {}{}  r reverse  Up/Down scroll",
            self.sort.heading(),
            if self.reverse { " (reversed)" } else { "" }
        );
        f.render_widget(
            Paragraph::new(Line::styled(
                keys_line,
                Style::new().add_modifier(Modifier::REVERSED),
            )),
            keys,
        );
    }

    /// The flow table: the columns the width allows (the path column takes what is left;
    /// narrow terminals lose the source port, the PSN gaps and the NAKs first).
    fn draw_flows(&mut self, f: &mut Frame, area: Rect) {
        let mut rows = flow_rows(&self.docs);
        self.sort.apply(&mut rows, self.reverse);
        let cols = columns(area.width);
        let header = Row::new(cols.iter().map(|c| {
            let h = c.heading();
            let marked = c.sort() == Some(self.sort);
            Cell::from(if marked {
                format!("{h} {}", if self.reverse { "↑" } else { "↓" })
            } else {
                h.to_string()
            })
        }))
        .style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED));
        // The path column as wide as its longest entry (16 at least): the rest of a wide
        // terminal stays on the right, not between the addresses and the numbers.
        let path = rows
            .iter()
            .map(|r| r.path().len())
            .max()
            .unwrap_or(0)
            .max(16) as u16;
        let widths: Vec<Constraint> = cols
            .iter()
            .map(|c| match c {
                Column::Path => Constraint::Length(path),
                c => c.width(),
            })
            .collect();
        let elephant = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
        let body = rows.iter().map(|r| {
            let row = Row::new(cols.iter().map(|c| c.cell(r)));
            if r.elephant {
                row.style(elephant)
            } else {
                row
            }
        });
        if rows.is_empty() {
            self.table.select(None);
        } else {
            let at = (self.scroll as usize).min(rows.len() - 1);
            self.scroll = at as u16;
            self.table.select(Some(at));
        }
        let table = Table::new(body, widths)
            .header(header)
            .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED));
        f.render_stateful_widget(table, area, &mut self.table);
    }
}

/// The flow table's columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Column {
    Elephant,
    Iface,
    Path,
    Sport,
    Qp,
    By(Sort),
}

impl Column {
    fn heading(self) -> &'static str {
        match self {
            Column::Elephant => "E",
            Column::Iface => "IFACE",
            Column::Path => "SRC -> DST",
            Column::Sport => "SPORT",
            Column::Qp => "DEST QP",
            Column::By(s) => s.heading(),
        }
    }

    fn sort(self) -> Option<Sort> {
        match self {
            Column::By(s) => Some(s),
            Column::Iface => Some(Sort::Iface),
            _ => None,
        }
    }

    fn width(self) -> Constraint {
        match self {
            Column::Elephant => Constraint::Length(1),
            Column::Iface => Constraint::Length(10),
            Column::Path => Constraint::Min(16),
            Column::Sport => Constraint::Length(5),
            Column::Qp => Constraint::Length(8),
            Column::By(Sort::Rate) => Constraint::Length(11),
            Column::By(_) => Constraint::Length(10),
        }
    }

    fn cell(self, r: &FlowRow) -> Cell<'static> {
        let s = match self {
            Column::Elephant => (if r.elephant { "E" } else { "" }).to_string(),
            Column::Iface => r.iface.clone(),
            Column::Path => r.path(),
            Column::Sport => r.sport.to_string(),
            Column::Qp => r.qp(),
            Column::By(Sort::Rate) => r.rate(),
            Column::By(Sort::Packets) => format!("{:.0}", r.packets_per_second),
            Column::By(Sort::Ce) => format!("{:.0}", r.ce),
            Column::By(Sort::Cnp) => format!("{:.0}", r.cnp),
            Column::By(Sort::Gaps) => r.gaps.to_string(),
            Column::By(Sort::Naks) => r.naks.to_string(),
            Column::By(Sort::Iface) => r.iface.clone(),
        };
        Cell::from(s)
    }
}

/// The columns a table `width` cells wide shows.
pub fn columns(width: u16) -> Vec<Column> {
    let mut c = vec![
        Column::Elephant,
        Column::Iface,
        Column::Path,
        Column::Qp,
        Column::By(Sort::Rate),
        Column::By(Sort::Packets),
        Column::By(Sort::Ce),
        Column::By(Sort::Cnp),
    ];
    if width >= 110 {
        c.insert(3, Column::Sport);
        c.extend([Column::By(Sort::Gaps), Column::By(Sort::Naks)]);
    }
    c
}

/// Runs the view until `q`: `refresh` reads the agent from a thread every `interval`; the
/// screen is redrawn on every key, resize and refresh. The terminal is restored on every way
/// out (ratatui's panic hook for a panic).
pub fn run(
    mut refresh: impl FnMut() -> Result<Docs> + Send + 'static,
    interval: Duration,
    first: Docs,
    addr: &str,
) -> Result<()> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || loop {
        std::thread::sleep(interval);
        let got = refresh().map_err(|e| format!("{e:#}"));
        if tx.send(got).is_err() {
            return;
        }
    });
    let mut terminal = ratatui::try_init()?;
    let mut ui = Ui::new(first, addr);
    let out = (|| -> Result<()> {
        let mut dirty = true;
        loop {
            if dirty {
                terminal.draw(|f| ui.draw(f))?;
                dirty = false;
            }
            if event::poll(Duration::from_millis(100))? {
                match event::read()? {
                    Event::Key(k) if k.kind != KeyEventKind::Release => {
                        match ui.key(k.code, k.modifiers) {
                            Action::Quit => return Ok(()),
                            Action::Redraw => dirty = true,
                            Action::None => {}
                        }
                    }
                    Event::Resize(..) => dirty = true,
                    _ => {}
                }
            }
            while let Ok(got) = rx.try_recv() {
                match got {
                    Ok(d) => {
                        ui.docs = d;
                        ui.error = None;
                    }
                    Err(e) => ui.error = Some(e),
                }
                dirty = true;
            }
        }
    })();
    ratatui::restore();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    fn docs() -> Docs {
        let flow = |src: &str, bps: f64, ce: f64, elephant: bool| {
            serde_json::json!({"iface": "eth0", "src": src, "dst": "10.0.0.9", "sport": 49152,
                "dest_qp": 0x12, "rate_bytes_per_second": bps / 8.0, "rate_packets_per_second": 10.0,
                "ce_per_second": ce, "cnp_per_second": 0.0, "psn_gaps": 0, "naks": {},
                "rnr_naks": 0, "elephant": elephant})
        };
        Docs {
            flows: serde_json::json!({"flows_total": 2, "elephants_total": 1, "flows": [
                flow("10.0.0.1", 8e9, 1.0, true), flow("fd00:1:2:3:4:5:6:7", 1e6, 50.0, false)]}),
            ecmp: serde_json::json!({"groups": [], "shared_5tuples": []}),
            summary: serde_json::json!({"interfaces": 1, "rx_bits_per_second": 8e9,
                "tx_bits_per_second": 0.0, "ce_ratio": 0.01, "cnp_per_second": 3.0,
                "pfc_paused_ratio": 0.0, "findings_active": 0,
                "verdict": "CE on one receiver."}),
            findings: serde_json::json!({"active": [{"severity": "warning", "kind": "congestion",
                "subject": "receiver 10.0.0.9", "summary": "1.0% CE", "start_s": 960.0}]}),
            now_s: 1000.0,
            ..Docs::default()
        }
    }

    fn screen(ui: &mut Ui, w: u16, h: u16) -> Vec<String> {
        let mut t = Terminal::new(TestBackend::new(w, h)).expect("test terminal");
        t.draw(|f| ui.draw(f)).expect("draw");
        let buf = t.backend().buffer().clone();
        (0..h)
            .map(|y| {
                (0..w)
                    .map(|x| buf[(x, y)].symbol().to_string())
                    .collect::<String>()
            })
            .collect()
    }

    #[test]
    fn header_tabs_and_keys_fit_80_columns() {
        let mut ui = Ui::new(docs(), "127.0.0.1:9442");
        let s = screen(&mut ui, 80, 24);
        assert!(s[1].contains("RoCE rx 8.0 Gb/s"), "{s:#?}");
        assert!(s[0].contains("2 flows, 1 elephants, 0 findings"), "{s:#?}");
        assert!(s[2].contains("Verdict: CE on one receiver."), "{s:#?}");
        assert!(
            s[3].starts_with("warning congestion for 40 s: receiver 10.0.0.9: 1.0% CE"),
            "the most severe findings and their age under the verdict: {s:#?}"
        );
        assert!(
            s[4].contains("1 Flows") && s[4].contains("6 Switches"),
            "{s:#?}"
        );
        assert!(s[23].starts_with("q quit"), "{s:#?}");
        assert!(s[22].starts_with("E elephant"), "the column key: {s:#?}");
        assert!(s[5].contains("RATE b/s") && s[5].contains("CE/s"), "{s:#?}");
    }

    #[test]
    fn a_wide_terminal_shows_every_column() {
        let mut ui = Ui::new(docs(), "a");
        let s = screen(&mut ui, 200, 50);
        for h in ["SPORT", "PSN GAPS", "NAKS", "DEST QP"] {
            assert!(s[5].contains(h), "{h}: {s:#?}");
        }
        assert!(s[7].contains("[fd00:1:2:3:4:5:6:7] -> 10.0.0.9"), "{s:#?}");
    }

    #[test]
    fn s_sorts_by_the_next_column_and_marks_it() {
        let mut ui = Ui::new(docs(), "a");
        let s = screen(&mut ui, 120, 20);
        assert!(s[6].contains("10.0.0.1 "), "by rate first: {s:#?}");
        ui.key(KeyCode::Char('s'), KeyModifiers::NONE);
        ui.key(KeyCode::Char('s'), KeyModifiers::NONE);
        let s = screen(&mut ui, 120, 20);
        assert!(s[5].contains("CE/s ↓"), "{s:#?}");
        assert!(s[6].contains("fd00"), "by CE: {s:#?}");
        assert!(s[19].contains("sort: CE/s"), "{s:#?}");
    }

    #[test]
    fn q_escape_and_ctrl_c_quit() {
        let mut ui = Ui::new(docs(), "a");
        assert_eq!(ui.key(KeyCode::Char('q'), KeyModifiers::NONE), Action::Quit);
        assert_eq!(ui.key(KeyCode::Esc, KeyModifiers::NONE), Action::Quit);
        assert_eq!(
            ui.key(KeyCode::Char('c'), KeyModifiers::CONTROL),
            Action::Quit
        );
        assert_eq!(ui.key(KeyCode::Char('x'), KeyModifiers::NONE), Action::None);
    }

    #[test]
    fn number_keys_switch_views() {
        let mut ui = Ui::new(docs(), "a");
        ui.key(KeyCode::Char('5'), KeyModifiers::NONE);
        assert_eq!(ui.view, View::Training);
        let s = screen(&mut ui, 80, 10);
        assert!(s[5].contains("Nothing to show in Training yet."), "{s:#?}");
        ui.key(KeyCode::Tab, KeyModifiers::NONE);
        assert_eq!(ui.view, View::Switches);
        ui.key(KeyCode::Tab, KeyModifiers::NONE);
        assert_eq!(ui.view, View::Flows);
    }

    #[test]
    fn a_failed_refresh_is_said_on_the_title_line() {
        let mut ui = Ui::new(docs(), "a");
        ui.error = Some("cannot reach rocemon".into());
        let s = screen(&mut ui, 80, 10);
        assert!(s[0].contains("cannot reach rocemon"), "{s:#?}");
    }
}
