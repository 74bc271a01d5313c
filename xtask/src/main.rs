fn main() -> anyhow::Result<()> {
    let dir = std::path::PathBuf::from(std::env::args().nth(2).unwrap_or("target/fixtures".into()));
    for p in rocemon_testkit::fixtures::generate_all(&dir)? {
        let e = rocemon_testkit::tshark::expected(&p)?;
        println!("{}: frames {} roce {} bytes {} cnp {} ecn {:?} flows {} no-bth {} ops {}", p.display(), e.frames, e.roce_packets, e.roce_bytes, e.cnp, e.ecn, e.flows.len(), e.port_4791_without_bth, e.opcodes.len());
    }
    Ok(())
}
