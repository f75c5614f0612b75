//! The paths that move large payloads without copying them: decoding from a
//! shared buffer, reading torch.save records from one, writing chunked
//! `bytes` and chunked legacy streams. Each must give exactly the bytes and
//! values of its copying counterpart.

use tensorshare_compat::DType;
use tensorshare_compat::pickle::{
    ByteChunks, EncodeOptions, Limits, Node, Pickle, SharedBytes, decode_all, decode_all_shared,
    encode, encode_vectored,
};
use tensorshare_compat::torch_save::{
    self, ReadOptions, SavedStorage, TorchSaveFormat, legacy_stream_chunks, push_storage_pid,
    write_legacy,
};

const NO_GLOBALS: fn(&str, &str) -> bool = |_, _| false;

/// A pickle of a list holding `payloads` as `bytes`, the last one twice
/// (the second time fetched from the memo).
fn list_of_bytes(payloads: &[ByteChunks]) -> Pickle {
    let mut pickle = Pickle::new();
    let mut items: Vec<_> = payloads
        .iter()
        .map(|payload| pickle.push(Node::Bytes(payload.clone())))
        .collect();
    if let Some(&last) = items.last() {
        items.push(last);
    }
    let list = pickle.push(Node::List(items));
    pickle.set_root(list);
    pickle
}

/// `bytes` split into chunks at `cuts`.
fn split(bytes: &[u8], cuts: &[usize]) -> ByteChunks {
    let mut chunks = Vec::new();
    let mut start = 0;
    for &cut in cuts.iter().chain([&bytes.len()]) {
        chunks.push(SharedBytes::from(&bytes[start..cut]));
        start = cut;
    }
    ByteChunks::from_chunks(chunks)
}

#[test]
fn chunked_bytes_encode_as_their_joined_bytes_in_every_protocol() {
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    let cases: [(usize, &[usize]); 6] = [
        (0, &[]),
        (10, &[3, 3, 7]),
        (65_535, &[1, 65_534]),
        (65_536, &[65_536]),
        (200_000, &[100, 70_000, 70_100]),
        (300_000, &[65_536, 131_072, 131_073]),
    ];
    for protocol in 2..=5 {
        let options = EncodeOptions::new().with_protocol(protocol);
        let chunked: Vec<ByteChunks> = cases
            .iter()
            .map(|(len, cuts)| split(&data[..*len], cuts))
            .collect();
        let joined: Vec<ByteChunks> = cases
            .iter()
            .map(|(len, _)| ByteChunks::from(&data[..*len]))
            .collect();
        let expected = encode(&list_of_bytes(&joined), &options).unwrap();
        let vectored = encode_vectored(&list_of_bytes(&chunked), &options).unwrap();
        assert_eq!(vectored.len(), expected.len(), "protocol {protocol}");
        let slices = vectored.io_slices();
        let written: Vec<u8> = slices.iter().flat_map(|s| s.iter().copied()).collect();
        assert_eq!(written, expected, "protocol {protocol}");
        assert_eq!(vectored.into_vec(), expected, "protocol {protocol}");
        assert_eq!(
            encode(&list_of_bytes(&chunked), &options).unwrap(),
            expected,
            "protocol {protocol}"
        );
    }
}

#[test]
fn large_chunks_are_written_from_their_own_buffers() {
    let storage = SharedBytes::from(vec![3u8; 100_000]);
    let header = SharedBytes::from(b"head".to_vec());
    let payload = ByteChunks::from_chunks(vec![header, storage.clone()]);
    let vectored = encode_vectored(&list_of_bytes(&[payload]), &EncodeOptions::new()).unwrap();
    let slices = vectored.io_slices();
    let out_of_line = slices
        .iter()
        .filter(|slice| slice.as_ptr() == storage.as_ptr())
        .count();
    // Written once; the memo fetches the second reference.
    assert_eq!(out_of_line, 1);
    // Protocol 2 writes bytes as `_codecs.encode(str)`: nothing to point at.
    let protocol2 = EncodeOptions::new().with_protocol(2);
    let copied = encode_vectored(&list_of_bytes(&[storage.clone().into()]), &protocol2).unwrap();
    assert!(
        copied
            .io_slices()
            .iter()
            .all(|slice| slice.as_ptr() != storage.as_ptr())
    );
}

#[test]
fn shared_decoding_slices_large_payloads_and_copies_small_ones() {
    let large = vec![9u8; 64 * 1024];
    let small = vec![8u8; 64 * 1024 - 1];
    let pickle = list_of_bytes(&[large.clone().into(), small.clone().into()]);
    let message = SharedBytes::from(encode(&pickle, &EncodeOptions::new()).unwrap());
    let range = message.as_ptr_range();

    let shared = decode_all_shared(&message, &NO_GLOBALS, &Limits::default()).unwrap();
    let copied = decode_all(&message, &NO_GLOBALS, &Limits::default()).unwrap();
    assert_eq!(shared, copied);

    let Node::List(items) = shared.pickle.get(shared.pickle.root().unwrap()).unwrap() else {
        panic!("not a list");
    };
    let chunk = |id| match shared.pickle.get(id).unwrap() {
        Node::Bytes(bytes) => bytes.chunks()[0].clone(),
        other => panic!("not bytes: {other:?}"),
    };
    assert!(
        range.contains(&chunk(items[0]).as_ptr()),
        "64 KiB is shared"
    );
    assert!(
        !range.contains(&chunk(items[1]).as_ptr()),
        "below is copied"
    );
    assert_eq!(&*chunk(items[0]), &large[..]);
    assert_eq!(&*chunk(items[1]), &small[..]);
}

#[test]
fn shared_decoding_refuses_what_copying_decoding_refuses() {
    let mut message = encode(
        &list_of_bytes(&[vec![1u8; 100_000].into()]),
        &EncodeOptions::new(),
    )
    .unwrap();
    for cut in [1, 20, message.len() / 2, message.len() - 1] {
        let truncated = SharedBytes::from(&message[..cut]);
        assert_eq!(
            decode_all_shared(&truncated, &NO_GLOBALS, &Limits::default()).unwrap_err(),
            decode_all(&truncated, &NO_GLOBALS, &Limits::default()).unwrap_err(),
        );
    }
    message.push(b'.');
    let trailing = SharedBytes::from(message);
    assert_eq!(
        decode_all_shared(&trailing, &NO_GLOBALS, &Limits::default()).unwrap_err(),
        decode_all(&trailing, &NO_GLOBALS, &Limits::default()).unwrap_err(),
    );
}

/// `storage`'s legacy stream (what a `_load_from_bytes` payload holds),
/// written into one buffer and as chunks.
fn legacy_streams(storage: SavedStorage<'_>) -> (Vec<u8>, ByteChunks) {
    let mut object = Pickle::new();
    let pid = push_storage_pid(&mut object, TorchSaveFormat::Legacy, &storage).unwrap();
    object.set_root(pid);
    let mut written = Vec::new();
    write_legacy(&mut written, &object, &[storage]).unwrap();
    let chunks = legacy_stream_chunks(&object, &[storage]).unwrap();
    (written, chunks)
}

fn floats(numel: usize) -> SharedBytes {
    SharedBytes::from(
        (0..numel)
            .flat_map(|i| (i as f32).to_le_bytes())
            .collect::<Vec<u8>>(),
    )
}

#[test]
fn a_chunked_legacy_stream_is_the_written_one_with_the_storage_uncopied() {
    for numel in [0, 1, 100_000] {
        let data = floats(numel);
        let (written, chunks) =
            legacy_streams(SavedStorage::shared("0", Some(DType::Float32), &data));
        assert_eq!(chunks.to_vec(), written, "{numel} elements");
        let last = chunks.chunks().last().unwrap();
        assert_eq!(last.as_ptr(), data.as_ptr(), "{numel} elements");
    }
    // Storages without a shared buffer are copied into the chunks.
    let (written, chunks) = legacy_streams(SavedStorage::new("0", None, &[1, 2, 3]));
    assert_eq!(chunks.chunks().len(), 1);
    assert_eq!(chunks.to_vec(), written);
}

#[test]
fn shared_reading_gives_records_that_are_slices_of_the_input() {
    let data = floats(50_000);
    let (written, _) = legacy_streams(SavedStorage::shared("0", Some(DType::Float32), &data));
    let input = SharedBytes::from(written.clone());
    let options = ReadOptions::default();
    let shared = torch_save::read_shared(&input, &NO_GLOBALS, &options).unwrap();
    let copied = torch_save::read(&written, &NO_GLOBALS, &options).unwrap();
    assert_eq!(shared, copied);
    let record = &shared.records["0"].data;
    assert_eq!(record, &data);
    assert!(input.as_ptr_range().contains(&record.as_ptr()));
    // A truncated stream fails the same way both ways.
    let cut = &written[..written.len() - 1];
    assert_eq!(
        torch_save::read_shared(&SharedBytes::from(cut), &NO_GLOBALS, &options)
            .unwrap_err()
            .to_string(),
        torch_save::read(cut, &NO_GLOBALS, &options)
            .unwrap_err()
            .to_string(),
    );
}
