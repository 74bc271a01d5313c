//! The middle of the pipeline: the flow table with rates and elephants ([`flows`]; a flow
//! the full kernel map pushed out keeps its totals: [`flow_lives`]), the flow
//! records it gives for export ([`flow_records`], counting with [`flow_counts`]), the pipeline over a capture ([`analysis`], its time-ordered half [`flow_side`], its clock [`capture_clock`]), the capture views over time ([`timeline`], [`training`], the jobs and
//! their slow steps explained: [`training_view`]), and the capture's findings ([`findings`]:
//! one window of the findings engine), and the analysis threads' [`prefetch`].

pub mod analysis;
pub mod analyze_options;
pub mod capture_clock;
pub mod findings;
pub mod flow_counts;
pub mod flow_lives;
pub mod flow_records;
pub mod flow_runner;
pub mod flow_side;
pub mod flows;
pub mod pair_trouble;
pub mod prefetch;
pub mod stages;
pub mod timeline;
pub mod training;
pub mod training_view;
pub mod views_side;
