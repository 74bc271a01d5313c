//! Loss recovery as incidents: one per data flow that lost packets, with the NAKs its
//! receiver sent back folded in. A NAK travels on the reverse flow (responder to requester,
//! to the requester's QP), so counted per flow one loss reads as two findings: the data flow's
//! gap and go-back, and a flow that "only" carried NAKs. Here the NAK-only flows of a host
//! pair are handed to the data flow of the reversed pair that lost the most, and report
//! nothing of their own. A NAK-only flow whose reverse direction shows no loss (the capture
//! saw one direction, or the loss happened before it) stays an incident of its own: the NAKs
//! are then the only evidence.

/// One flow's loss evidence, as counted per packet.
#[derive(Clone, Copy, Debug)]
pub struct Loss<'a> {
    pub src: &'a str,
    pub dst: &'a str,
    pub psn_gaps: u64,
    pub retransmits: u64,
    pub naks: u64,
}

impl Loss<'_> {
    /// Lost packets seen on the flow itself (a gap in its requests, or a go-back).
    fn lost(&self) -> u64 {
        self.psn_gaps + self.retransmits
    }
}

/// One recovery incident: the flow it is reported on, and the NAKs folded into it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incident {
    /// Index of the flow in the input.
    pub flow: usize,
    /// NAKs of reverse flows folded into this one.
    pub naks_back: u64,
    /// Indexes of the NAK-only flows folded in.
    pub folded: Vec<usize>,
}

/// The incidents of `flows`, most evidence first (ties in input order). Linear in the flows
/// (one map of host pairs).
pub fn incidents(flows: &[Loss<'_>]) -> Vec<Incident> {
    use std::collections::HashMap;
    // Per host pair (src, dst): the data flow that lost the most.
    let mut lossiest: HashMap<(&str, &str), usize> = HashMap::new();
    for (i, l) in flows.iter().enumerate() {
        if l.lost() == 0 {
            continue;
        }
        let e = lossiest.entry((l.src, l.dst)).or_insert(i);
        if flows[*e].lost() < l.lost() {
            *e = i;
        }
    }
    let mut out: Vec<Incident> = Vec::new();
    let mut at: HashMap<usize, usize> = HashMap::new();
    for (i, l) in flows.iter().enumerate() {
        if l.lost() > 0 {
            at.insert(i, out.len());
            out.push(Incident {
                flow: i,
                naks_back: 0,
                folded: Vec::new(),
            });
        }
    }
    for (i, l) in flows.iter().enumerate() {
        if l.lost() > 0 || l.naks == 0 {
            continue;
        }
        match lossiest.get(&(l.dst, l.src)).and_then(|d| at.get(d)) {
            Some(&k) => {
                out[k].naks_back += l.naks;
                out[k].folded.push(i);
            }
            None => out.push(Incident {
                flow: i,
                naks_back: 0,
                folded: Vec::new(),
            }),
        }
    }
    let weight = |x: &Incident| {
        let l = &flows[x.flow];
        l.lost() + l.naks + x.naks_back
    };
    out.sort_by(|a, b| weight(b).cmp(&weight(a)).then(a.flow.cmp(&b.flow)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loss<'a>(src: &'a str, dst: &'a str, gaps: u64, retx: u64, naks: u64) -> Loss<'a> {
        Loss {
            src,
            dst,
            psn_gaps: gaps,
            retransmits: retx,
            naks,
        }
    }

    #[test]
    fn a_nak_on_the_reverse_flow_folds_into_the_data_flow() {
        let flows = [loss("b", "a", 0, 0, 1), loss("a", "b", 1, 15, 0)];
        assert_eq!(
            incidents(&flows),
            vec![Incident {
                flow: 1,
                naks_back: 1,
                folded: vec![0],
            }]
        );
    }

    #[test]
    fn naks_without_loss_in_the_reverse_direction_stay_their_own_incident() {
        let flows = [loss("b", "a", 0, 0, 2), loss("a", "c", 1, 1, 0)];
        let got = incidents(&flows);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].flow, 0, "four pieces of evidence against two");
        assert_eq!(got[1].naks_back, 0);
    }

    #[test]
    fn the_naks_of_a_pair_go_to_the_data_flow_that_lost_the_most() {
        let flows = [
            loss("a", "b", 1, 1, 0),
            loss("a", "b", 3, 9, 0),
            loss("b", "a", 0, 0, 2),
            loss("b", "a", 0, 0, 1),
        ];
        let got = incidents(&flows);
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[0],
            Incident {
                flow: 1,
                naks_back: 3,
                folded: vec![2, 3],
            }
        );
        assert_eq!(got[1].naks_back, 0);
    }

    #[test]
    fn flows_without_loss_or_naks_are_no_incident() {
        assert!(incidents(&[loss("a", "b", 0, 0, 0)]).is_empty());
    }
}
