//! (in progress)
#[derive(Debug)] pub struct NewReno;
impl NewReno { pub fn new(_m: u64, _i: u64) -> Self { todo!() } }
impl super::CongestionController for NewReno { fn name(&self)->&'static str{"newreno"} fn on_sent(&mut self,_:braid_core::Instant,_:u64,_:u64){} fn on_ack(&mut self,_:braid_core::Instant,_:&super::Acked){} fn on_congestion_event(&mut self,_:braid_core::Instant,_:braid_core::Instant,_:u64,_:bool){} fn on_retransmission_timeout(&mut self,_:braid_core::Instant){} fn window(&self)->u64{0} fn ssthresh(&self)->u64{0} fn set_parameter(&mut self,_:&str,_:f64)->Result<(),super::CcError>{Ok(())} fn parameters(&self)->Vec<(&'static str,f64)>{vec![]} }
