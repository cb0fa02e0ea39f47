use super::*;

fn options(sample: u32) -> Options {
    Options {
        cpu: true,
        net: true,
        count: 10,
        duration: None,
        sample,
        slots: None,
    }
}

/// Where `key` is in `frame`.
fn place(frame: &[u8], key: &[u8]) -> (usize, usize) {
    let start = frame.windows(key.len()).position(|w| w == key).unwrap();
    (start, start + key.len())
}

/// [`place`] as a one-key sample takes it.
fn place32(frame: &[u8], key: &[u8]) -> (u32, u32) {
    let (start, end) = place(frame, key);
    (u32::try_from(start).unwrap(), u32::try_from(end).unwrap())
}

#[test]
fn a_request_of_several_keys_gives_each_an_equal_share() {
    let load = SlotLoad::new(1, 0);
    let hot = HotKeys::new(1);
    hot.start(options(1), &load).unwrap();
    let generation = hot.sampled().unwrap();
    let one: &[u8] = b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n";
    let sample = Sample::new(generation, place32(one, b"a")).unwrap();
    hot.record(0, (sample, one), 100, Some(Duration::from_micros(30)));
    let three: &[u8] = b"*4\r\n$4\r\nMGET\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n";
    let keys = [b"b", b"c", b"d"].map(|k| place(three, k));
    let sample = Sample::of_keys(generation, keys).unwrap();
    hot.record(0, (sample, three), 90, Some(Duration::from_micros(60)));

    let report = hot.report(&load).unwrap();
    let by_net: Vec<(&[u8], u64)> = report.by_net.iter().map(|(k, c)| (&k[..], *c)).collect();
    assert_eq!(
        by_net,
        [(&b"a"[..], 100), (b"b", 30), (b"c", 30), (b"d", 30)]
    );
    let by_cpu: Vec<(&[u8], u64)> = report.by_cpu.iter().map(|(k, c)| (&k[..], *c)).collect();
    assert_eq!(
        by_cpu,
        [(&b"a"[..], 30), (b"b", 20), (b"c", 20), (b"d", 20)]
    );
    assert_eq!((report.sampled_bytes, report.sampled_micros), (190, 90));
    assert_eq!(report.total_net_bytes, 190);
}

#[test]
fn a_sample_of_an_earlier_session_is_left_out() {
    let load = SlotLoad::new(1, 0);
    let hot = HotKeys::new(1);
    hot.start(options(1), &load).unwrap();
    let old = hot.sampled().unwrap();
    assert!(hot.stop(&load) && hot.reset(&load));
    hot.start(options(1), &load).unwrap();
    let frame: &[u8] = b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n";
    let sample = Sample::new(old, place32(frame, b"a")).unwrap();
    hot.record(0, (sample, frame), 100, None);
    assert!(hot.report(&load).unwrap().by_net.is_empty());
}
