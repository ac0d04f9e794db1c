package sqlite

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/rand/v2"
)

// A -wal cannot be shown to belong to its main file by where it lies: cp
// onto an existing -wal keeps its inode and extended attributes, and a
// foreign database copied over the main file keeps the main file's. So
// the identity is in the content: every ledger carries an identity of its
// own in its application_id (in the header on page 1), and every idem
// write transaction writes page 1 (stamp), so that every transaction in a
// -wal carries, in its page-1 frame, the identity of the ledger it was
// written to. checkJournal reads them before SQLite opens the file.

// legacyApplicationID is the application_id of every ledger made before
// ledgers had identities of their own ("idem"). An open for writing gives
// such a ledger one (rekey).
const legacyApplicationID = 0x6964656d

// idemIDTag is the top byte of every ledger's application_id ('i'): it
// marks the file as an idem ledger; the low 24 bits are the ledger's own.
const idemIDTag = 0x69

// isIdemID reports whether an application_id is an idem ledger's.
func isIdemID(id uint32) bool { return id>>24 == idemIDTag }

// newLedgerID returns a random identity for a new ledger (never the
// legacy one).
func newLedgerID() uint32 {
	for {
		id := idemIDTag<<24 | rand.Uint32()&0xffffff
		if id != legacyApplicationID {
			return id
		}
	}
}

// walIdentities returns the application_ids that the page-1 frames of the
// -wal image w carry (see walIdentitiesAt).
func walIdentities(w []byte) (ids []uint32, ok bool) {
	return walIdentitiesAt(bytes.NewReader(w), int64(len(w)))
}

// walIdentitiesAt returns the application_ids that the page-1 frames of the
// -wal r (size bytes) carry, in the transactions SQLite would replay: the
// frames whose salts are the header's and whose cumulative checksums hold,
// up to the last commit frame, as SQLite's recovery reads them. ok is
// false when it has no valid header (SQLite ignores such a -wal). It
// reads one frame at a time into one buffer: a run pays a page fault for
// every page of memory it touches first, more than for the reads.
func walIdentitiesAt(r io.ReaderAt, size int64) (ids []uint32, ok bool) {
	be := binary.BigEndian
	var hdr [walHeaderSize]byte
	if size < walHeaderSize {
		return nil, false
	}
	if _, err := r.ReadAt(hdr[:], 0); err != nil {
		return nil, false
	}
	if be.Uint32(hdr[:])&^1 != 0x377f0682 || be.Uint32(hdr[4:]) != 3007000 {
		return nil, false
	}
	big := be.Uint32(hdr[:])&1 == 1
	s1, s2 := walChecksum(big, hdr[:24], 0, 0)
	if s1 != be.Uint32(hdr[24:]) || s2 != be.Uint32(hdr[28:]) {
		return nil, false
	}
	pageSize := int64(be.Uint32(hdr[8:]))
	if pageSize < 512 || pageSize > 65536 || pageSize&(pageSize-1) != 0 {
		return nil, false
	}
	f := make([]byte, walFrameHdr+pageSize)
	var pending []uint32 // page-1 identities of the transaction not yet committed
	for off := int64(walHeaderSize); off+int64(len(f)) <= size; off += int64(len(f)) {
		if _, err := r.ReadAt(f, off); err != nil {
			break
		}
		if be.Uint32(f[8:]) != be.Uint32(hdr[16:]) || be.Uint32(f[12:]) != be.Uint32(hdr[20:]) {
			break // a frame of an earlier generation of the -wal
		}
		s1, s2 = walChecksum(big, f[:8], s1, s2)
		s1, s2 = walChecksum(big, f[walFrameHdr:], s1, s2)
		if s1 != be.Uint32(f[16:]) || s2 != be.Uint32(f[20:]) {
			break // torn: SQLite stops here too
		}
		if be.Uint32(f) == 1 {
			pending = append(pending, be.Uint32(f[walFrameHdr+68:]))
		}
		if be.Uint32(f[4:]) != 0 { // a commit frame
			ids, pending = append(ids, pending...), nil
		}
	}
	return ids, true
}

// walChecksum continues SQLite's WAL checksum (s1, s2) over b, read as
// 32-bit words, big-endian when big (else little-endian, what SQLite
// writes on x86 and arm64). One loop per byte order, not a
// binary.ByteOrder: through the interface no load is inlined, and the
// checksum is most of what reading a -wal costs an open.
func walChecksum(big bool, b []byte, s1, s2 uint32) (uint32, uint32) {
	if big {
		for ; len(b) >= 8; b = b[8:] {
			s1 += binary.BigEndian.Uint32(b) + s2
			s2 += binary.BigEndian.Uint32(b[4:]) + s1
		}
		return s1, s2
	}
	for ; len(b) >= 8; b = b[8:] {
		s1 += binary.LittleEndian.Uint32(b) + s2
		s2 += binary.LittleEndian.Uint32(b[4:]) + s1
	}
	return s1, s2
}
