//! The window every source hands the findings engine: what was seen over one span of time,
//! in the same shape whether it came from a poll of the kernel maps, AF_XDP, an sFlow stream
//! or a capture. Each source gathers its evidence its own way (a capture has every packet's
//! time, a poll only the counters' deltas); the judging is [`super::judge`], once.

use super::trouble::Trouble;

/// One window's evidence.
#[derive(Debug, Default)]
pub struct Window<'a> {
    /// Seconds: Unix time live, from the capture's first frame offline.
    pub span: (f64, f64),
    /// Watched interfaces that are down or gone (live).
    pub links_down: Vec<&'a str>,
    /// Priorities paused without a break for longer than [`Window::storm_s`].
    pub storms: Vec<Storm>,
    /// The storm threshold the storms were found with, seconds.
    pub storm_s: f64,
    /// Receivers congested and flows in loss recovery, as the flows showed them.
    pub trouble: Option<&'a Trouble>,
    /// Senders judged for their answer to CNPs.
    pub reactions: Vec<Reaction>,
    /// RoCE packets outside the configured lossless classes.
    pub lossy: Vec<Lossy>,
    pub elephants: Vec<Elephant>,
    /// Colliding ECMP members: (group, member, elephants on it).
    pub collisions: Vec<(String, String, usize)>,
    /// Groups of connections sharing one UDP 5-tuple, and an example of one.
    pub shared_5tuples: (usize, Option<String>),
    pub slow_steps: Vec<SlowStep>,
    pub flow_maps: Vec<FlowMaps<'a>>,
}

/// An interface's flow maps: (map, entries, capacity) each, and the flows they pushed out
/// over the window.
#[derive(Clone, Debug)]
pub struct FlowMaps<'a> {
    pub iface: &'a str,
    pub pushed_out: u64,
    pub fill: Vec<(&'static str, u64, u64)>,
}

/// A priority paused without a break.
#[derive(Clone, Debug)]
pub struct Storm {
    pub priority: u8,
    pub span: (f64, f64),
    pub xoff_frames: u64,
    /// The MAC that sent the XOFFs (a capture's frames).
    pub mac: Option<String>,
    /// Where it was seen (live: the interface), when the subject should name it.
    pub place: Option<String>,
}

/// One connection's senders judged for their answer to bursts of CNPs.
#[derive(Clone, Debug)]
pub struct Reaction {
    pub src: String,
    pub dst: String,
    pub sport: u16,
    pub dest_qp: u32,
    pub bursts: u64,
    pub ignored: u64,
    /// The mean after/before rate ratio over the bursts.
    pub ratio: f64,
    pub rate_before_bytes_per_second: f64,
    pub span: (f64, f64),
}

/// Lossy RoCE: packets outside the lossless classes.
#[derive(Clone, Debug)]
pub struct Lossy {
    pub lossy: u64,
    pub roce: u64,
    /// The classes that were expected (for the sentence).
    pub expected: String,
    pub place: Option<String>,
}

/// An elephant flow.
#[derive(Clone, Debug)]
pub struct Elephant {
    /// The flow's name ([`crate::detect::findings::flow_name`]).
    pub flow: String,
    /// Its peak rate (a capture) or its rate now (live), bytes per second.
    pub bytes_per_second: f64,
    /// A capture's whole bytes and span; None live (an elephant now).
    pub over: Option<(u64, (f64, f64))>,
}

/// A slow training step, its causes already weighed ([`crate::detect::slow_steps`]).
#[derive(Clone, Debug)]
pub struct SlowStep {
    pub index: usize,
    pub span: (f64, f64),
    pub seconds: f64,
    pub typical_seconds: f64,
    pub causes: Vec<(&'static str, f64)>,
    /// (host, started late s, ended late s).
    pub straggler: Option<(String, f64, f64)>,
    /// The job whose step it is, where the link carries several jobs (each its own steps).
    pub job: Option<String>,
    /// Where it was seen (live: the interface), when the subject should name it.
    pub place: Option<String>,
}
