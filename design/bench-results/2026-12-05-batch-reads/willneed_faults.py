# After MADV_WILLNEED of a batch's ranges, are their pages in the page cache (cachestat(2), which counts pages
# being read), and does touching them take major faults? Batches of 32 random 2-page ranges of a file whose
# pages are dropped first; with the hint (checked with cachestat between hint and touches, or not) and
# without it. Usage: python3 willneed_faults.py <file>
import mmap, os, random, resource, sys, time, ctypes, ctypes.util
path = sys.argv[1]
fd = os.open(path, os.O_RDONLY)
size = os.fstat(fd).st_size
m = mmap.mmap(fd, size, prot=mmap.PROT_READ)
m.madvise(mmap.MADV_RANDOM)
libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
class R(ctypes.Structure): _fields_=[("off",ctypes.c_uint64),("len",ctypes.c_uint64)]
class C(ctypes.Structure): _fields_=[(n,ctypes.c_uint64) for n in ("cache","dirty","wb","ev","rev")]
def cached(off, ln):
    r=R(off,ln); c=C()
    rc=libc.syscall(451, fd, ctypes.byref(r), ctypes.byref(c), 0)
    return c.cache if rc==0 else -1
def majflt(): return resource.getrusage(resource.RUSAGE_SELF).ru_majflt
rng = random.Random(1)
for hint, check in ((True, True), (True, False), (False, False), (True, False), (True, True)):
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    faults=0; present=0; ranges=0; t=time.time()
    for b in range(50):
        offs=[rng.randrange(0, size-16384)//4096*4096 + 2048 for _ in range(32)]
        if hint:
            for o in offs: m.madvise(mmap.MADV_WILLNEED, o//4096*4096, 8192)
            if check: present += sum(cached(o//4096*4096, 8192) for o in offs)
        f0=majflt()
        for o in offs: _=m[o]; _=m[o+4096]
        faults += majflt()-f0; ranges+=32
    print(f"hint={hint}, cachestat between hint and touches={check}: {ranges} ranges of 2 pages, pages in page cache right after the hint {present}, major faults {faults} ({faults/ranges:.2f}/range), {ranges/(time.time()-t):.0f} ranges/s")
