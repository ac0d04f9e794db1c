/*
 * idem's lease protocol for one key, as a Promela model for spin.
 *
 * Run it (model_test.go does this for every variant below):
 *
 *     spin -a [-DVARIANT ...] idem.pml
 *     gcc -O2 -DSAFETY -DCOLLAPSE -DVECTORSZ=1024 -DMEMLIM=2048 -o pan pan.c
 *     ./pan -m10000 -w24          # look for "errors: 0"
 *     spin -t [-DVARIANT ...] idem.pml | grep MSC   # a counterexample's story
 *
 * ======================================================================
 * THE FIXED PROTOCOL (the default; what the runner is to implement)
 * ======================================================================
 *
 * A run is one attempt of one invocation: (ledger id, key, token,
 * attempt). Every process of a run -- the child and all its descendants,
 * also those that setsid away -- carries that identity in its environment
 * and inherits an open file description that holds the key's run lock.
 *
 *  1. Reserve (one transaction): create the record (token from the
 *     ledger-wide counter, which is durable and never goes back), replay
 *     a final one, answer busy for a live in_progress owner, or take over
 *     an in_progress record whose lease expired or whose owner is dead on
 *     this host (OwnerDead; same boot id and PID namespace): a fresh token,
 *     the old owner returned as Abandoned. A retryable record is taken the
 *     same way. Nothing about the old run's processes needs to be kept in
 *     the record.
 *  2. stopRun, on a takeover, on a retryable record, and before every next
 *     attempt of an invocation (and on a new key only when its run lock is
 *     held: every process of a run holds it, so a free lock means there is
 *     nothing to find, and fresh runs pay for no scan): find every process
 *     of an older run of the key (procs.Finder.Find: a /proc scan for the
 *     key's identity, IDEM_RUN, with a smaller token, or this invocation's
 *     earlier attempt) and the Abandoned idem itself (pid and start
 *     time from the record, same host, in the taker's PID namespace or
 *     one below it, found there by NSpid); SIGTERM them, SIGKILL after --kill-grace
 *     (signals to idem meanwhile never cut the grace short); scan again
 *     until nothing older is found. While it waits it keeps its own lease.
 *     A taker that dies here forgets nothing: the next taker scans again.
 *  3. Run lock (takeLock), before the first attempt: take the key's lock (an OFD
 *     lock in a lock file beside the ledger) without waiting. The lock must
 *     conflict with the lock of EVERY other run of the key on this host,
 *     not only the Abandoned one's (e.g. a byte per key, taken
 *     exclusively). Testing only the abandoned token's byte misses an
 *     older run that is not the abandoned one: after a busy taker
 *     released the record, the next run takes a retryable record with no
 *     Abandoned owner and overlaps the sibling namespace's run (variant
 *     LOCK_ABANDONED_ONLY). Held by a process the scan cannot
 *     see (a sibling PID namespace, or the stale idem of a chain of
 *     takeovers): do not run; report busy and Release the reservation
 *     (the record as it was, under a fresh token).
 *  4. Claim (claim), with the lock held, just before the child starts: a fenced
 *     write (Renew on the first attempt, StartAttempt on the next ones).
 *     No row: lease lost, start nothing. (Without it, an owner paused
 *     between Reserve and startChild starts its child after another run
 *     recorded a success: variant NO_CLAIM.) The first attempt's claim is
 *     folded into the reservation when the reservation's own lease still
 *     holds by idem's own clock: then no run can have taken the record
 *     (a takeover needs the lease expired, or idem dead). Judged by the
 *     record's lease instead, a taker's fresh lease passes: variant
 *     FOLD_ON_RECORD.
 *  5. startChild: the child starts in its own group with the run's
 *     identity in its environment and the lock's descriptor inherited; its
 *     group may be recorded later (SetChild) for operators, but nothing
 *     depends on that write any more.
 *  6. While it runs: Renew (fenced) keeps the lease; no row: abort (stop
 *     the run, have it dead), write nothing, exit 75. The lease watchdog:
 *     when a ledger call does not return, the runner stops its own run
 *     (TERM, KILL after the grace) and has it dead before its lease can
 *     expire on the ledger's clock, then exits 74; every ledger call has a
 *     deadline that fits inside the lease.
 *  7. The child exits: EndAttempt (fenced) and the next attempt (back to
 *     2: its stopRun finds this attempt's leftovers), or Finish (fenced,
 *     durable) succeeded / failed. Grandchildren may outlive the
 *     invocation: they keep the lock, so a later run of the key sees them.
 *  8. Purge without --force never removes an in_progress record, expired
 *     or not (its processes may still run).
 *  9. Fencing: every owner write is WHERE key = ? AND token = ?. Across
 *     hosts a frozen owner (SIGSTOP, a paused VM) cannot stop its child,
 *     so there only fencing downstream keeps it harmless: the downstream
 *     system keeps the highest token seen and refuses lower ones
 *     (UPDATE ... WHERE last_token <= $IDEM_TOKEN). Tokens never repeat:
 *     the counter is durable (a high-water mark), even when a reservation
 *     is not.
 *
 * ======================================================================
 * THE MODEL
 * ======================================================================
 *
 * One key; NO = 3 invocations (Owner 0..2), each with up to ATT = 2
 * attempts; tokens are bounded by the invocations (at most 6 are drawn:
 * one Reserve and one Release each).
 *
 * State: the record (status, token, owner, lease expired or not), the
 * token counter; per execution (owner, attempt): its child (dies with
 * idem: Pdeathsig) and one grandchild (no Pdeathsig, ignores SIGTERM, runs
 * until SIGKILLed: the worst case); per owner: idem alive, a SIGKILL
 * pending, may be paused, ledger call hung, took the run lock, its token.
 *
 * Processes: Owner (the runner, steps named after the functions), Chaos
 * (SIGKILL or crash of any idem at any step: an `unless` escape from the
 * owner's body; its direct child dies, grandchildren stay), Procs (a child
 * forks a grandchild, or exits), Clock (lease expiry), Purge (`idem purge
 * KEY`, no --force), Downstream (fenced writes by any living process of
 * a run), and with FLEET PowerCut.
 *
 * Time and leases: there is no clock value. A lease may expire only when
 * its owner cannot renew it: its idem is dead, it may be paused
 * (SIGSTOP, a paused VM, starved: then at any moment), or its watchdog
 * has acted (after stopping its run). A live owner renews in time. A
 * paused owner simply takes no step meanwhile (interleaving gives it
 * every delay); on one host every owner may be paused, in FLEET each owner
 * is chosen pausable or not. Kill grace: SIGTERM and SIGKILL are two
 * steps, and anything (crash, pause, expiry, other owners) may happen
 * between them.
 *
 * Hosts and namespaces. One host (default): owners 0 and 1 share a PID
 * namespace, owner 2 is in a sibling one: it and they cannot see each
 * other's processes (no OwnerDead, no scan), but share the lock file.
 * FLEET (a shared PostgreSQL ledger): two owners, each on its own host:
 * no scan, OwnerDead or lock across hosts; only expiry frees a record.
 *
 * ======================================================================
 * PROPERTIES (assertions; the hidden names appear in a failure's text)
 * ======================================================================
 *
 *  no_overlap            no two executions of a key overlap: when a child
 *                        starts, no process of another execution is alive
 *                        (the only step where an execution begins).
 *  no_run_after_success  a recorded success is never followed by another
 *                        execution: no child starts once a success is
 *                        recorded.
 *  fencing               a downstream write from a stale run is never
 *                        accepted after a newer run's write: every
 *                        accepted write comes from a run reserved no
 *                        earlier than the last accepted one.
 *
 * In FLEET, overlaps and late starts involving a frozen owner, an owner
 * whose reservation a power cut lost, or a killed owner's grandchildren
 * are excused (no other host can stop them): there fencing is the
 * guarantee. (-DNO_DOWNSTREAM leaves the downstream system out.)
 *
 * ======================================================================
 * VARIANTS (preprocessor defines)
 * ======================================================================
 *
 * (none)                   fixed protocol, one host: must verify
 * FLEET                    fixed protocol, two hosts: must verify
 * GROUPS                   today's group bookkeeping (the record lists the
 *                          process groups and abandoned idems that may
 *                          still run; all owners in one namespace) with
 *                          violations 1, 2, 3 and 6 closed: verifies, so
 *                          each TODAY_ variant fails through its own bug
 * TODAY_TAKER_FORGETS      violation 1: Reserve sets child_pgid = 0 on a
 *                          takeover; what may still run is only in the
 *                          taker's memory, lost when it dies or is paused
 * TODAY_SETCHILD_WINDOW    violation 2: the group is recorded (SetChild)
 *                          after the child started
 * TODAY_PURGE_EXPIRED      violation 3: purge without --force removes an
 *                          in_progress record whose lease expired
 * TODAY_STARTATTEMPT_FORGETS  violation 6: the next attempt forgets the
 *                          exited attempt's group (StartAttempt sets
 *                          child_pgid = 0) and overlaps its background job
 * NO_RUN_LOCK              fixed protocol without the lock: a sibling
 *                          namespace's run is overlapped
 * LOCK_ABANDONED_ONLY      fixed protocol with a lock byte per token, the
 *                          taker testing only the abandoned one's: overlap
 * ENV_CLEARING             a first attempt's grandchild may clear its
 *                          environment and keep fd 3: must verify (the
 *                          relock before the next attempt finds it)
 * ENV_CLEARING TODAY_ONE_DESCRIPTION  one lock description for the whole
 *                          invocation: the next attempt overlaps that
 *                          grandchild
 * NO_CLAIM                 fixed protocol without the fenced write before
 *                          startChild: a run after a recorded success
 * FOLD_ON_RECORD           the first claim folded when the record's lease
 *                          holds rather than the owner's own: a run after
 *                          a recorded success
 * FLEET NO_WATCHDOG        a hung ledger call lets the lease expire while
 *                          the child runs: overlap across hosts
 * FLEET TODAY_TOKEN_NOT_DURABLE  a power cut takes the counter back with
 *                          a lost reservation: a token is handed out
 *                          twice and the stale run's write is accepted
 * REACH, FLEET REACH       guards against a vacuous model: the fixed
 *                          protocol must reach a takeover that SIGKILLs an
 *                          older run's TERM-ignoring grandchild and then
 *                          runs (one host), and a stale run's downstream
 *                          write that is refused (FLEET); these "fail"
 *
 * ======================================================================
 * SEARCH AND BOUNDS
 * ======================================================================
 *
 * Exhaustive search (no bitstate, no -DBITSTATE), safety only (-DSAFETY:
 * assertions and invalid end states), partial-order reduction, state
 * compression (-DCOLLAPSE), hash table 2^24 (-w24), depth bound 10000
 * (-m10000; the deepest path is about 140 steps, so the bound never cuts
 * the search; the test fails on "max search depth too small", on the
 * -DMEMLIM=2048 bound, or without pan's "Full statespace search").
 * Measured on the CI machine (2 shared cores), pan alone, spin 6.5.2:
 *
 *   variant                      result     states    memory    time
 *   (none)                       errors: 0  4265100   351 MB    9.2 s
 *   FLEET                        errors: 0  2550669   254 MB    7.4 s
 *   GROUPS                       errors: 0  1215072   199 MB    4.3 s
 *   TODAY_TAKER_FORGETS          errors: 1   153924   138 MB    0.2 s
 *   TODAY_SETCHILD_WINDOW        errors: 1    12385   130 MB    0.0 s
 *   TODAY_PURGE_EXPIRED          errors: 1    14225   130 MB    0.0 s
 *   TODAY_STARTATTEMPT_FORGETS   errors: 1      168   129 MB    0.0 s
 *   NO_RUN_LOCK                  errors: 1   250732   142 MB    0.5 s
 *   LOCK_ABANDONED_ONLY          errors: 1   278168   144 MB    0.4 s
 *   NO_CLAIM                     errors: 1   778258   169 MB    1.4 s
 *   FLEET NO_WATCHDOG            errors: 1  3139990   285 MB    6.9 s
 *   FLEET TODAY_TOKEN_NOT_DURABLE errors: 1   15842   130 MB    0.0 s
 *   REACH / FLEET REACH          errors: 1  12302 / 15842  130 MB  0.0 s
 *
 * (A counterexample variant stops at its first error; its states are
 * those searched until then. Memory is mostly the 128 MB hash table.
 * The whole set, with spin -a and gcc for each, takes about a minute.)
 *
 * ======================================================================
 * ABSTRACTED AWAY / LEFT OUT
 * ======================================================================
 *
 * - Real time: durations, backoff delays, --timeout, --deadline, the kill
 *   grace's length; only the order of events matters (see Time above).
 * - The ledger is one atomic record: SQLite's BEGIN IMMEDIATE and
 *   PostgreSQL's single-statement claims are taken to be atomic;
 *   I/O errors and retries of a write are not modelled, only a call that
 *   hangs (the watchdog) and a fenced write that finds no row.
 * - Exit codes and classification: the outcome of an attempt is a free
 *   choice (succeeded, failed, or transient with an attempt left); the
 *   budget, --rerun-failed, TTL expiry of final records and the purge of
 *   final records (an operator's reset, after which a run is expected)
 *   are left out; purge --force is left out.
 * - Signals to idem (SIGINT/SIGTERM forwarding, --wait polling): the only
 *   signal that ends an idem is SIGKILL / a crash (Chaos), and the
 *   abandoned idem's SIGKILL by a taker; a retryable record arises only
 *   from Release.
 * - The /proc scan and the lock are exact: a process of a run is found
 *   (same namespace) and holds the lock until it dies. A process that
 *   clears its environment AND closes its inherited descriptors escapes
 *   both; pid reuse is out of scope (the scan matches the identity, and
 *   OwnerDead the start time).
 * - One grandchild per execution, which never exits on its own (exiting
 *   only removes overlaps); the child exits, or dies by SIGTERM.
 * - One host: every owner may be paused; the watchdog cannot matter
 *   there (the lock and scan already cover a hung owner). FLEET: two
 *   owners only (three owners with every pausable choice and downstream
 *   writes did not finish within 10 minutes); power cut of the ledger's
 *   server once, losing the reservations since the last Finish.
 */

/* ------------------------------------------------------------------ */
/* Bounds                                                              */

#define NO   3            /* owners: idem invocations of the one key */
#define ATT  2            /* attempts per invocation (macros below assume 2) */
#define NE   (NO*ATT)     /* executions: one child (+ grandchild) per attempt */
#define EX(o,a) ((o)*ATT + (a))

/* Record statuses. */
#define NONE   0
#define INPROG 1
#define SUCC   2
#define FAIL   3
#define RETRY  4

/* Which protocol: today's process-group bookkeeping (each TODAY_ define
 * re-introduces one bug into it; GROUPS alone is that bookkeeping with
 * those bugs fixed), or the fixed protocol (run identity, run lock). */
#if defined(TODAY_TAKER_FORGETS) || defined(TODAY_SETCHILD_WINDOW) || defined(TODAY_PURGE_EXPIRED) || \
	defined(TODAY_STARTATTEMPT_FORGETS)
#define GROUPS 1
#endif

/* Where the owners run. FLEET: each owner on its own host (a shared
 * PostgreSQL ledger). Otherwise one host (SQLite): with the fixed protocol
 * the last owner is in a sibling PID namespace (it and the others cannot
 * see each other's processes, but share the lock file); today's
 * group bookkeeping is modelled in one namespace only. */
#if defined(FLEET)
#define NS(o) (o)
#define SAMEHOST(o,p) ((o) == (p))
#elif defined(GROUPS)
#define NS(o) 0
#define SAMEHOST(o,p) 1
#else
#define NS(o) ((o) == NO-1)
#define SAMEHOST(o,p) 1
#endif
#define VIS(o,p) (NS(o) == NS(p))   /* o can see p's processes */

/* ------------------------------------------------------------------ */
/* The ledger's record of the key                                      */

byte rstat = NONE;   /* status */
byte rtok;           /* fencing token of the current owner */
byte rown = NO;      /* owner holding rtok (NO: none) */
bit  rexp;           /* its lease has expired (on the ledger's clock) */
bit  mexp[NO];       /* owner o's own lease has expired, as o's clock tells,
                      * between its Reserve and its first claim (the only
                      * time it is read; 0 otherwise, to keep states few):
                      * it stays set when another owner takes the record */
bit  inwin[NO];      /* owner o is between its Reserve and its first claim */
byte ctr;            /* the ledger-wide token counter (durable) */

#ifdef GROUPS
/* What the record says may still run: the process groups recorded by
 * SetChild (bit EBIT(e)) and abandoned owners' idem processes (OBIT(o)). */
short left;
#define EBIT(e) (1 << (e))
#define OBIT(p) (1 << (NE + (p)))
#endif

/* ------------------------------------------------------------------ */
/* Processes                                                            */

bit ch[NE];          /* the attempt's child (direct, Pdeathsig) is alive */
bit gc[NE];          /* its grandchild (no Pdeathsig, ignores SIGTERM) is alive */
bit hid[NE];         /* that grandchild cleared its environment (the scan by
                      * identity misses it) but keeps fd 3, its attempt's
                      * lock description */
bit alive[NO];       /* owner's idem process is alive */
bit kill[NO];        /* SIGKILL (or a crash) is pending for owner's idem */
bit frozen[NO];      /* owner may be paused (SIGSTOP, VM) past its lease */
bit hung[NO];        /* a ledger call of owner hangs (its watchdog acted) */
bit locked[NO];      /* owner's run took the run lock */
byte tok[NO];        /* owner's token (0: none yet) */

/* Ghosts for the properties. */
bit succeeded;       /* a success was recorded */

/* Always 0, outside the state vector: they only name the property in
 * the text of a failed assertion. */
hidden byte no_overlap;
hidden byte no_run_after_success;
hidden byte fencing;
hidden byte reachable;   /* REACH: the scenario the assertion names happens */

#ifndef NO_DOWNSTREAM
#define DOWNSTREAM 1
#endif

#ifdef DOWNSTREAM
byte seq[NO];        /* order of the owners' reservations */
byte nseq;
/* The downstream system: the highest token seen, and the reservation
 * order of the run that wrote it. */
byte dlast;
byte dseq;
#endif

#ifdef FLEET
/* Cross-host, nothing stops the processes of a frozen owner, of an owner
 * whose reservation a power cut lost, or a killed owner's grandchildren:
 * their overlaps are excused, and the fencing property covers them. */
bit excused[NO];
/* The ledger as of its last durable commit (Finish, synchronous): a
 * power cut of the ledger's server goes back to it. */
byte dstat = NONE;
byte dtok;
byte dctr;
#define EXCUSED(i) excused[(i)/ATT]
#else
#define EXCUSED(i) 0
#endif

#define RUNALIVE(p) (ch[EX(p,0)] || gc[EX(p,0)] || ch[EX(p,1)] || gc[EX(p,1)])

/* The ledger owner p is known dead to o: same host and PID namespace,
 * and its pid is gone (OwnerDead). */
#define OWNERDEAD(p,o) (SAMEHOST(o,p) && VIS(o,p) && !alive[p])

/* The run lock is free for o: no process of another run on o's host that
 * took it is alive (it is held by idem and inherited by every process of
 * its run; it goes when the last of them dies). */
#define LOCKHELD(o,p) ((o) != (p) && SAMEHOST(o,p) && locked[p] && (alive[p] || RUNALIVE(p)))
#if defined(NO_RUN_LOCK)
#define LOCKFREE(o) 1
#elif defined(LOCK_ABANDONED_ONLY)
/* a lock byte per token, and the taker tests only the abandoned one's */
#define LOCKFREE(o) (ab == NO || !LOCKHELD(o,ab))
#else
#define LOCKFREE(o) (!LOCKHELD(o,0) && !LOCKHELD(o,1) && !LOCKHELD(o,2))
#endif

/* An execution that another one must not overlap. */
#define ACTIVE(i) (ch[i] || gc[i])

/* startChild: the child starts; the properties are checked here, the only
 * step at which a new execution begins (a grandchild is forked only by a
 * living child of the same execution). */
inline startChild() {
	d_step {
		i = 0;
		do
		:: i < NE ->
			/* no two executions of a key overlap */
			assert(no_overlap || i == EX(o,a) || !ACTIVE(i) || EXCUSED(i) || EXCUSED(EX(o,a)));
			i++
		:: else -> break
		od;
		i = 0;
		/* a recorded success is never followed by another execution */
		assert(no_run_after_success || !succeeded || EXCUSED(EX(o,a)));
#if defined(REACH) && !defined(FLEET)
		/* reachable: a taker SIGKILLed an older run's grandchild that
		 * ignored SIGTERM, and then starts its own child */
		assert(reachable || !killedgc);
#endif
		ch[EX(o,a)] = 1;
		printf("MSC: startChild: owner %d token %d attempt %d\n", o, tk, a+1)
	}
}

/* The fenced writes: WHERE key = ? AND token = ?; no row: lease lost. */
#define OWNS (rtok == tk)

#ifndef GROUPS
/* ---- the fixed protocol: run identity ---------------------------- */

/* An older run's process that o finds by its identity (a /proc scan for
 * the key's runs with a smaller token, or this invocation's earlier
 * attempt), or the abandoned owner's idem named by the record. */
#define OLDER(p) ((p) != o && VIS(o,p) && tok[p] != 0 && tok[p] < tk && RUNALIVE(p))
#define FOUND (OLDER(0) || OLDER(1) || OLDER(2) || \
	(a == 1 && (ch[EX(o,0)] || gc[EX(o,0)] && !hid[EX(o,0)])) || \
	(ab != NO && VIS(o,ab) && alive[ab]))

/* stopRun, the SIGTERM: reaches every process found; the child exits,
 * the grandchild ignores it. */
inline termFound() {
	d_step {
		i = 0;
		do
		:: i < NO ->
			if
			:: i != o && VIS(o,i) && tok[i] != 0 && tok[i] < tk ->
				ch[EX(i,0)] = 0; ch[EX(i,1)] = 0
			:: else
			fi;
			i++
		:: else -> break
		od;
		i = 0;
		if
		:: a == 1 -> ch[EX(o,0)] = 0
		:: else
		fi
	}
}

/* stopRun, the SIGKILL after the kill grace: everything found is gone
 * (the abandoned owner's idem dies at its next step). */
inline killFound() {
	d_step {
		i = 0;
		do
		:: i < NO ->
			if
			:: i != o && VIS(o,i) && tok[i] != 0 && tok[i] < tk ->
#ifdef REACH
				killedgc = killedgc || gc[EX(i,0)] || gc[EX(i,1)];
#endif
				ch[EX(i,0)] = 0; ch[EX(i,1)] = 0;
				gc[EX(i,0)] = 0; gc[EX(i,1)] = 0
			:: else
			fi;
			i++
		:: else -> break
		od;
		i = 0;
		if
		:: a == 1 -> ch[EX(o,0)] = 0;
			if :: !hid[EX(o,0)] -> gc[EX(o,0)] = 0 :: else fi
		:: else
		fi;
		if
		:: ab != NO && VIS(o,ab) && alive[ab] -> kill[ab] = 1;
			printf("MSC: stopRun: owner %d kills abandoned idem %d\n", o, ab)
		:: else
		fi
	}
}

/* abort / the watchdog: stop this run's own processes (found by identity)
 * and have them dead. */
inline stopOwn() {
	d_step {
		ch[EX(o,0)] = 0; gc[EX(o,0)] = 0;
		ch[EX(o,1)] = 0; gc[EX(o,1)] = 0
	}
}

#else
/* ---- today's group bookkeeping ------------------------------------ */

#define EALIVE(s,e) (((s) & EBIT(e)) && (ch[e] || gc[e]))
#define OALIVE(s,p) (((s) & OBIT(p)) && alive[p])
#define SALIVE(s) (EALIVE(s,0) || EALIVE(s,1) || EALIVE(s,2) || EALIVE(s,3) || \
	EALIVE(s,4) || EALIVE(s,5) || OALIVE(s,0) || OALIVE(s,1) || OALIVE(s,2))

/* stopGroup's SIGTERM to every group (and abandoned idem) in s. */
inline termGroups(s) {
	d_step {
		i = 0;
		do
		:: i < NE -> if :: (s) & EBIT(i) -> ch[i] = 0 :: else fi; i++
		:: else -> break
		od;
		i = 0
	}
}

/* stopGroup's SIGKILL after the grace. */
inline killGroups(s) {
	d_step {
		i = 0;
		do
		:: i < NE -> if :: (s) & EBIT(i) -> ch[i] = 0; gc[i] = 0 :: else fi; i++
		:: else -> break
		od;
		i = 0;
		do
		:: i < NO -> if :: ((s) & OBIT(i)) && alive[i] -> kill[i] = 1 :: else fi; i++
		:: else -> break
		od;
		i = 0
	}
}

inline stopOwn() {
	d_step { ch[EX(o,a)] = 0; gc[EX(o,a)] = 0 }
}
#endif

/* ------------------------------------------------------------------ */
/* An idem invocation                                                   */

proctype Owner(byte o) {
	byte tk;             /* my token */
	byte a;              /* attempt 0..ATT-1 */
	byte ab = NO;        /* the abandoned owner, on a takeover */
	byte i;
	bit took;            /* the record existed (Release restores it) */
#ifdef REACH
	bit killedgc;
#endif
#ifdef GROUPS
	short mine;          /* what the taker holds only in memory */
#endif

	{
		/* Reserve: one transaction. */
		atomic {
			if
			:: rstat == NONE ->
				ctr++; tk = ctr; took = 0;
#ifdef GROUPS
				left = 0;
#endif
			:: rstat == RETRY ->
				ctr++; tk = ctr; took = 1
			:: rstat == INPROG && (rexp || OWNERDEAD(rown, o)) ->
				/* takeover: the old owner is Abandoned */
				ab = rown; ctr++; tk = ctr; took = 1;
				printf("MSC: Reserve: owner %d takes over from owner %d\n", o, ab);
#ifdef GROUPS
#ifdef TODAY_TAKER_FORGETS
				/* child_pgid = 0: what may still run is only in my memory */
				mine = left | OBIT(ab); left = 0;
#else
				left = left | OBIT(ab);
#endif
#endif
			:: else -> goto done    /* replay (final) or busy (live owner) */
			fi;
			tok[o] = tk; rstat = INPROG; rtok = tk; rown = o; rexp = 0; mexp[o] = 0; inwin[o] = 1;
#ifdef DOWNSTREAM
			nseq++; seq[o] = nseq;
#endif
			printf("MSC: Reserve: owner %d gets token %d\n", o, tk)
		}

attempt:
#ifndef GROUPS
		/* stopRun: signal every process of an older run found by its
		 * identity, SIGKILL after the kill grace, re-scan until none.
		 * A new key (nothing taken) whose run lock is free skips the
		 * scan: every process of a run holds its lock. */
		do
		:: (took || a == 1 || !LOCKFREE(o)) && FOUND -> termFound(); /* the kill grace */ killFound()
		:: else -> break
		od;
		if
		:: a == 0 ->
			/* the run lock: taken before anything starts; held by a
			 * process of an older run that the scan cannot see: busy */
			atomic {
				if
				:: LOCKFREE(o) -> locked[o] = 1
				:: else -> printf("MSC: run lock held: owner %d busy\n", o); goto busy
				fi
			}
		:: else ->
#ifndef TODAY_ONE_DESCRIPTION
			/* relock: idem closes its copy of the description the
			 * attempt that ended inherited and locks the key's byte
			 * on a new one; whatever still holds the old one (a
			 * process that cleared its environment) is found by the
			 * lock it holds (/proc/PID/fdinfo) and stopped, SIGKILL
			 * after the kill grace, before the next attempt starts */
			d_step { ch[EX(o,0)] = 0; gc[EX(o,0)] = 0 }
#else
			/* today: one description for the whole invocation, which
			 * idem itself still holds: the lock cannot tell */
			skip
#endif
		fi;
		/* Renew (first attempt) / StartAttempt (next ones): a fenced
		 * write, with the lock held, just before the child starts. The
		 * first attempt's is folded into the reservation while the
		 * reservation's own lease still holds by idem's clock (the
		 * runner: less than a renewal period has passed since it asked
		 * for it): then no other run can have taken the record. */
#ifndef NO_CLAIM
		if
#ifndef FOLD_ON_RECORD
		:: atomic { a == 0 && !mexp[o] -> inwin[o] = 0 }
#else
		/* wrong: the record's lease may be a taker's, fresh */
		:: atomic { a == 0 && !rexp -> inwin[o] = 0; mexp[o] = 0 }
#endif
		:: else ->
			atomic {
				inwin[o] = 0; mexp[o] = 0;
				if
				:: OWNS -> rexp = 0
				:: else -> goto done
				fi
			}
		fi;
#endif
		startChild();
#else
		/* stopGroup: everything the record (or my memory) says may run */
		do
		:: atomic { SALIVE(left | mine) -> termGroups(left | mine) };
			/* the kill grace */
			killGroups(left | mine)
		:: else ->
			/* all gone: forget them (fenced) */
			atomic {
				if
				:: OWNS -> left = 0; mine = 0
				:: else -> goto lost
				fi
			};
			break
		od;
#ifdef TODAY_SETCHILD_WINDOW
		startChild();
		/* SetChild: a later write */
		atomic {
			if
			:: OWNS -> left = left | EBIT(EX(o,a));
				printf("MSC: SetChild: owner %d token %d\n", o, tk)
			:: else -> goto lost
			fi
		}
#else
		/* SetChild as part of the start (the group is recorded before
		 * the command runs) */
		atomic {
			if
			:: OWNS -> left = left | EBIT(EX(o,a))
			:: else -> goto done
			fi;
			startChild()
		}
#endif
#endif

		/* The attempt runs: wait for the child, renewing the lease. */
		do
		:: ch[EX(o,a)] == 0 -> break
		:: atomic { OWNS && rexp -> rexp = 0 }      /* Renew */
		:: !OWNS -> goto lost                        /* Renew: no row */
		:: hung[o] == 0 ->
			/* a ledger call hangs (a hung network, a frozen server, a
			 * held lock): the watchdog stops the run and has it dead
			 * (SIGTERM, SIGKILL after the kill grace) before the lease
			 * can expire; only then may it expire (Clock) */
#ifdef NO_WATCHDOG
			atomic {
				printf("MSC: owner %d: a ledger call hangs (no watchdog)\n", o);
				hung[o] = 1
			};
end_hung:		false
#else
			atomic {
				printf("MSC: owner %d: a ledger call hangs; the watchdog stops the run\n", o);
				stopOwn();
				hung[o] = 1
			};
			goto done
#endif
		od;

		/* The child exited: record the outcome. */
		if
		:: a < ATT-1 ->
			/* transient: EndAttempt (fenced), back off, next attempt */
			atomic {
				if
				:: OWNS
#ifdef TODAY_STARTATTEMPT_FORGETS
					/* StartAttempt sets child_pgid = 0: the exited
					 * attempt's background job is forgotten */
					; left = left & ~EBIT(EX(o,a))
#endif
				:: else -> goto lost
				fi
			};
			a++;
			goto attempt
		:: true ->
			/* Finish (fenced): succeeded or failed */
			atomic {
				if
				:: OWNS -> if
					:: rstat = SUCC; succeeded = 1;
						printf("MSC: Finish: owner %d token %d succeeded\n", o, tk)
					:: rstat = FAIL;
						printf("MSC: Finish: owner %d token %d failed\n", o, tk)
					fi;
					rexp = 0;
#ifdef FLEET
					dstat = rstat; dtok = rtok; dctr = ctr;
#endif
				:: else -> goto lost
				fi
			}
		fi;
		goto done;

#ifndef GROUPS
busy:
		/* Release (fenced): the record as it was, under a fresh token */
		atomic {
			if
			:: OWNS ->
				ctr++; rtok = ctr; rown = NO; rexp = 0;
				if
				:: took -> rstat = RETRY
				:: else -> rstat = NONE
				fi
			:: else
			fi
		};
		goto done;
#endif

lost:
		/* a fenced write matched no row: stop the child, write nothing */
		atomic {
			printf("MSC: owner %d: lease lost\n", o);
			stopOwn()
		};
done:
		skip
	} unless { kill[o] -> printf("MSC: owner %d's idem killed\n", o) };

	/* idem is gone (exited, or killed): its direct children die with it
	 * (Pdeathsig); grandchildren live on. */
	d_step {
#ifdef FLEET
		if
		:: RUNALIVE(o) -> excused[o] = 1   /* grandchildren out of reach */
		:: else
		fi;
#endif
		alive[o] = 0;
		ch[EX(o,0)] = 0; ch[EX(o,1)] = 0;
		tk = 0; a = 0; ab = 0; i = 0; took = 0
#ifdef GROUPS
		; mine = 0
#endif
	}
}

/* ------------------------------------------------------------------ */
/* The environment                                                      */

/* Crashes: any idem may be SIGKILLed (or crash) at any step. */
active proctype Chaos() {
end:	do
	:: d_step { alive[0] && !kill[0] -> kill[0] = 1 }
	:: d_step { alive[1] && !kill[1] -> kill[1] = 1 }
	:: d_step { alive[2] && !kill[2] -> kill[2] = 1 }
	od
}

/* The command's processes: a child may fork a grandchild, and may exit;
 * a grandchild runs until it is killed (the worst case). */
#define PROC(e) \
	:: d_step { ch[e] && !gc[e] -> gc[e] = 1; hid[e] = 0; \
		printf("MSC: execution %d forks a grandchild\n", e) } \
	HIDE(e) \
	:: d_step { ch[e] -> ch[e] = 0 }

/* ENV_CLEARING: a first attempt's child may instead fork a grandchild
 * that clears its environment and keeps fd 3 (only there: it is the
 * window between two attempts of one invocation that it tests, and the
 * state space stays small). */
#ifdef ENV_CLEARING
#define HIDE(e) \
	:: d_step { (e) % ATT == 0 && ch[e] && !gc[e] -> gc[e] = 1; hid[e] = 1; \
		printf("MSC: execution %d forks a grandchild that clears its environment\n", e) }
#else
#define HIDE(e)
#endif

active proctype Procs() {
end:	do
	PROC(0) PROC(1) PROC(2) PROC(3) PROC(4) PROC(5)
	od
}

/* The ledger's clock: a lease expires only when its owner cannot renew
 * it: idem is dead, paused, or its watchdog gave up (after stopping its
 * child). A live owner renews in time. */
active proctype Clock() {
end:	do
	:: d_step { rstat == INPROG && !rexp &&
		(!alive[rown] || frozen[rown] || hung[rown]) -> rexp = 1; mexp[rown] = inwin[rown];
		printf("MSC: lease of token %d expires\n", rtok) }
	od
}

/* An operator's `idem purge KEY` (no --force). Final records, which an
 * operator may purge to run a key again, are out of scope. */
active proctype Purge() {
#ifdef TODAY_PURGE_EXPIRED
	/* today: an in_progress record whose lease expired is removed */
end:	atomic { rstat == INPROG && rexp ->
		printf("MSC: Purge removes in_progress token %d\n", rtok);
		rstat = NONE; rtok = 0; rown = NO; rexp = 0; left = 0 }
#else
	/* fixed: an in_progress record is never removed without --force */
	skip
#endif
}

#ifdef DOWNSTREAM
/* Fenced writes downstream: any living process of a run may write with
 * its IDEM_TOKEN; the system keeps the highest token seen and refuses
 * lower ones (UPDATE ... WHERE last_token <= $IDEM_TOKEN). Property: a
 * write from a stale run is never accepted after a newer run's. */
#define DSW(e) \
	:: d_step { ACTIVE(e) && tok[(e)/ATT] >= dlast && \
		(tok[(e)/ATT] != dlast || seq[(e)/ATT] != dseq) -> \
		printf("MSC: downstream accepts a write of execution %d, token %d\n", e, tok[(e)/ATT]); \
		assert(fencing || seq[(e)/ATT] >= dseq); \
		dlast = tok[(e)/ATT]; dseq = seq[(e)/ATT] }

#ifdef REACH
/* reachable: a stale run's write is refused */
#define DSREFUSE(e) :: d_step { ACTIVE(e) && tok[(e)/ATT] < dlast -> assert(reachable) }
#else
#define DSREFUSE(e)
#endif

active proctype Downstream() {
end:	do
	DSW(0) DSW(1) DSW(2) DSW(3) DSW(4) DSW(5)
	DSREFUSE(0) DSREFUSE(1) DSREFUSE(2) DSREFUSE(3) DSREFUSE(4) DSREFUSE(5)
	od
}
#endif

#ifdef FLEET
/* A power cut of the ledger's server (or a failover): the record goes
 * back to its last durable commit, and an owner whose reservation was
 * lost runs on (excused: the at-least-once gap). The token counter is
 * durable (a high-water mark): it does not go back, unless
 * TODAY_TOKEN_NOT_DURABLE. */
active proctype PowerCut() {
	byte i;
	atomic {
		printf("MSC: power cut: the ledger goes back to token %d\n", dctr);
		i = 0;
		do
		:: i < NO -> if :: tok[i] > dctr -> excused[i] = 1 :: else fi; i++
		:: else -> break
		od;
		i = 0;
		rstat = dstat; rtok = dtok; rown = NO; rexp = 0;
#ifdef TODAY_TOKEN_NOT_DURABLE
		ctr = dctr
#endif
	}
}
#endif

init {
	atomic {
		alive[0] = 1; alive[1] = 1; alive[2] = 1;
#ifdef FLEET
		/* two owners on two hosts (the third stays idle) */
		alive[2] = 0;
		if :: frozen[0] = 1; excused[0] = 1 :: skip fi;
		if :: frozen[1] = 1; excused[1] = 1 :: skip fi;
#else
		/* one host: any owner may be paused (its lease may expire at
		 * any time); the most adversarial choice covers the others */
		frozen[0] = 1; frozen[1] = 1; frozen[2] = 1;
#endif
		run Owner(0); run Owner(1);
#ifndef FLEET
		run Owner(2)
#endif
	}
}
