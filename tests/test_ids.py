import time
import uuid

from runner.ids import new_process_id


def test_process_ids_are_uuid7_unique_and_sorted_by_creation() -> None:
    ids = [new_process_id() for _ in range(5000)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids), "ids made later must sort later, as strings"
    for value in ids[:50]:
        parsed = uuid.UUID(value)
        assert parsed.version == 7
        assert parsed.variant == uuid.RFC_4122


def test_process_id_carries_its_creation_time() -> None:
    before = time.time_ns() // 1_000_000
    value = new_process_id()
    after = time.time_ns() // 1_000_000
    millis = uuid.UUID(value).int >> 80
    assert before <= millis <= after + 1
