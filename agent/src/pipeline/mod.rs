//! The middle of the pipeline: the flow table with rates and elephants ([`flows`]), the pipeline over a capture ([`analysis`], its time-ordered half [`flow_side`]), and the capture views over time ([`timeline`], [`training`]).

pub mod analysis;
pub mod analyze_options;
pub mod flow_side;
pub mod flows;
pub mod stages;
pub mod timeline;
pub mod training;
