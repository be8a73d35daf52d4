"""Let a shared library built against glibc 2.38+ load on an older glibc when all it needs from
2.38 are the C23 parse functions (`__isoc23_strtol`, `__isoc23_sscanf`, ...).

glibc 2.38 headers redirect strtol/sscanf to C23 variants that differ only in also accepting a
`0b` binary prefix. llama-cpp-py-sync's wheel is tagged manylinux2014 but was linked that way,
so on Debian 12 (glibc 2.36, this project's CI) its libllama.so fails to load. `patched_copy`
writes a copy of such a library whose imports name the pre-C23 functions instead (unversioned,
so the loader binds libc's default version) and whose GLIBC_2.38 requirement is marked weak, the
way the ELF format marks an optional version. Nothing else in the file changes: the model code,
the kernels and their numbers are the wheel's own.
"""
from __future__ import annotations

import struct
from pathlib import Path

C23_PREFIX = b"__isoc23_"
SCANF = (b"sscanf", b"scanf", b"fscanf", b"vsscanf", b"vscanf", b"vfscanf",
         b"swscanf", b"wscanf", b"fwscanf", b"vswscanf", b"vwscanf", b"vfwscanf")
SHT_DYNSYM, SHT_GNU_VERSYM, SHT_GNU_VERNEED = 11, 0x6FFFFFFF, 0x6FFFFFFE
VER_NDX_GLOBAL, VER_FLG_WEAK = 1, 0x2
C23_GLIBC = (2, 38)  # the first glibc with the C23 parse functions
SYM = struct.Struct("<IBBHQQ")  # Elf64_Sym
SHDR = struct.Struct("<IIQQQQIIQQ")  # Elf64_Shdr


def _sections(data: bytearray) -> list[tuple]:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a little-endian ELF64 file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    return [SHDR.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]


def _c_string(data: bytearray, at: int) -> bytes:
    return bytes(data[at:data.index(0, at)])


def _glibc(version: bytes) -> tuple[int, ...]:
    """(2, 38) for b"GLIBC_2.38"; () for any other library's version name."""
    if not version.startswith(b"GLIBC_"):
        return ()
    return tuple(int(part) for part in version[len(b"GLIBC_"):].split(b"."))


def _imports_c23(data: bytearray) -> bool:
    return C23_PREFIX in data


def patch_c23_imports(data: bytearray) -> int:
    """Rewrite `data` (an ELF64 shared library) in place; returns how many imports were renamed.

    Raises ValueError when the library needs something else from glibc 2.38+, which no renaming
    can provide."""
    sections = _sections(data)
    dynsym = next(s for s in sections if s[1] == SHT_DYNSYM)
    strtab = sections[dynsym[6]][4]  # sh_link: the symbol names' string table, at sh_offset
    versym = next(s for s in sections if s[1] == SHT_GNU_VERSYM)[4]
    renamed, version_of_renamed = 0, set()
    for i in range(dynsym[5] // dynsym[9]):
        at = dynsym[4] + i * dynsym[9]
        name_at, info, other, shndx, value, size = SYM.unpack_from(data, at)
        name = _c_string(data, strtab + name_at)
        if shndx != 0 or not name.startswith(C23_PREFIX):
            continue
        base = name[len(C23_PREFIX):]
        if base in SCANF:  # the C99 scanf family has its own names: __isoc99_<name>
            data[strtab + name_at + 6:strtab + name_at + 8] = b"99"
        else:  # strtol and friends: plain <name>, the tail of the same string
            SYM.pack_into(data, at, name_at + len(C23_PREFIX), info, other, shndx, value, size)
        version_of_renamed.add(struct.unpack_from("<H", data, versym + 2 * i)[0] & 0x7FFF)
        struct.pack_into("<H", data, versym + 2 * i, VER_NDX_GLOBAL)
        renamed += 1
    still_used = {struct.unpack_from("<H", data, versym + 2 * i)[0] & 0x7FFF
                  for i in range(dynsym[5] // dynsym[9])}
    _weaken(data, sections, version_of_renamed - still_used)
    return renamed


def _weaken(data: bytearray, sections: list[tuple], versions: set[int]) -> None:
    """Mark the version requirements with these indices weak; refuse if one is still needed."""
    verneed = next(s for s in sections if s[1] == SHT_GNU_VERNEED)
    strtab = sections[verneed[6]][4]
    need = verneed[4]
    while True:
        _, cnt, _, aux_off, next_off = struct.unpack_from("<HHIII", data, need)
        aux = need + aux_off
        for _ in range(cnt):
            vhash, flags, other, name_at, aux_next = struct.unpack_from("<IHHII", data, aux)
            if other in versions:
                struct.pack_into("<H", data, aux + 4, flags | VER_FLG_WEAK)
            elif _glibc(_c_string(data, strtab + name_at)) >= C23_GLIBC:
                raise ValueError(f"needs {_c_string(data, strtab + name_at).decode()} for more than C23 parsing")
            aux += aux_next
        if not next_off:
            return
        need += next_off


def patched_copy(directory: Path, into: Path) -> Path:
    """Copy every shared library of `directory` into `into`, patching those that import C23
    functions; returns `into`. Their RUNPATH ($ORIGIN) then finds the copies, not the originals."""
    into.mkdir(parents=True, exist_ok=True)
    for lib in sorted(directory.glob("*.so*")):
        data = bytearray(lib.read_bytes())
        if _imports_c23(data):
            patch_c23_imports(data)
        (into / lib.name).write_bytes(bytes(data))
    return into
