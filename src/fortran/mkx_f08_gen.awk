# mkx_f08_gen.awk - the generator of the Fortran bindings' regular part.
# Reads src/fortran/mkx_f08.def (its top says what the lines mean) and
# writes, into the directory `out`:
#   mkx_f08_gen_spec.inc   public names, generic interfaces, C interfaces
#   mkx_f08_gen_procs.inc  the Fortran procedures
#   mkx_f08_gen_shim.inc   the C shim of the array and persistent variants
# Run it through mkx_f08_gen.sh.  POSIX awk only: configure requires awk,
# not gawk, so the drift test runs wherever the library builds.

function fail(msg) {
  printf "%s:%d: %s\n", FILENAME, FNR, msg > "/dev/stderr"
  failed = 1
  exit 1
}

# MKX_Allgather_gemm -> allgather_gemm
function stem(name) { return tolower(substr(name, 5)) }
function spaces(n,    s) { s = ""; while (n-- > 0) s = s " "; return s }

# ---- reading the table ------------------------------------------------------

/^[ \t]*(#|$)/ { next }

$1 == "doc" {
  line = $0
  sub(/^[ \t]*doc[ \t]?/, "", line)
  pending_doc = pending_doc "  ! " line "\n"
  next
}

$1 == "query" {
  if (cur) fail("query inside op " name[cur])
  if (NF != 4) fail("want: query NAME OUT INIT")
  n++
  kind[n] = "query"; name[n] = $2; qout[n] = $3; qinit[n] = $4
  doc[n] = pending_doc; pending_doc = ""
  next
}

$1 == "op" {
  if (cur) fail("op inside op " name[cur])
  if (NF < 3 || NF > 4 || (NF == 4 && $4 != "init") || $3 !~ /^[1-9]$/)
    fail("want: op NAME RANKS [init]")
  cur = ++n
  kind[n] = "op"; name[n] = $2; ranks[n] = $3; init[n] = (NF == 4)
  doc[n] = pending_doc; pending_doc = ""
  nargs[n] = 0
  next
}

$1 == "end" {
  if (!cur) fail("end outside an op")
  check_op(cur)
  cur = 0
  next
}

cur { add_arg(cur) ; next }

{ fail("unknown line: " $0) }

# What the generator relies on: the generic tells its specifics apart by
# the first buffer, and the shim refuses an array through dtype.
function check_op(e,    i, c) {
  if (nargs[e] == 0 || akind[e, 1] != "buf")
    fail(name[e] ": the first argument must be a buf")
  if (!is_enum(e, "dtype")) fail(name[e] ": no enum dtype argument")
  for (i = 1; i <= nargs[e]; i++) {
    c = acheck[e, i]
    if (akind[e, i] == "buf" && c !~ /^(int32|int64|float)$/ && !is_enum(e, c))
      fail(name[e] ": " aname[e, i] ": no enum " c " to check it against")
  }
}

function is_enum(e, nm,    i) {
  for (i = 1; i <= nargs[e]; i++)
    if (akind[e, i] == "enum" && aname[e, i] == nm) return 1
  return 0
}

function add_arg(e,    i, k) {
  k = $1
  i = ++nargs[e]
  akind[e, i] = k; aname[e, i] = $2; aopt[e, i] = 0
  if (k == "buf") {
    if ($3 != "in" && $3 != "out") fail("want: buf NAME in|out CHECK")
    if (NF < 4 || NF > 5 || (NF == 5 && $5 != "optional"))
      fail("want: buf NAME in|out CHECK [optional]")
    adir[e, i] = $3; acheck[e, i] = $4; aopt[e, i] = (NF == 5)
  } else if (k == "i64") {
    if (NF > 3 || (NF == 3 && $3 != "optional"))
      fail("want: i64 NAME [optional]")
    aopt[e, i] = (NF == 3)
  } else if (k == "enum") {
    if (NF != 3) fail("want: enum NAME CTYPE")
    actype[e, i] = $3
  } else if (k == "logical" || k == "double" || k == "comm" || k == "stream" ||
             k == "scales") {
    if (NF != 2) fail("want: " k " NAME")
  } else fail("unknown argument kind " k)
}

# ---- the argument list of one variant ---------------------------------------
# variant(e, is_init) fills vk/vn/vo/vd/vc/vt[1..nv]: the entry's arguments,
# with stream replaced by info and request for the _init call.

function variant(e, is_init,    i) {
  nv = 0
  for (i = 1; i <= nargs[e]; i++) {
    if (is_init && akind[e, i] == "stream") {
      push("info", "info", 0, "", "", "")
      push("request", "request", 0, "", "", "")
    } else
      push(akind[e, i], aname[e, i], aopt[e, i], adir[e, i], acheck[e, i],
           actype[e, i])
  }
}

# The arguments c_*_a and the shim's _a take after stream when the
# operation has an _init: one shim serves both.
function push_persistent() {
  push("persistent", "persistent", 0, "", "", "")
  push("info", "info", 0, "", "", "")
  push("request", "request", 0, "", "", "")
}

function push(k, nm, opt, dir, check, ctype) {
  nv++
  vk[nv] = k; vn[nv] = nm; vo[nv] = opt; vd[nv] = dir; vc[nv] = check
  vt[nv] = ctype
}

# ---- line wrapping ----------------------------------------------------------
# wrap(head, n, tail, indent, cont): head W[1], W[2], ..., W[n] tail, broken
# before a word that would pass column 79, Fortran's " &" (cont) included.

function wrap(head, cnt, tail, indent, cont,    s, line, i, w, room) {
  s = ""; line = head
  room = cont == "" ? 79 : 77
  for (i = 1; i <= cnt; i++) {
    w = W[i] (i < cnt ? "," : tail)
    if (i > 1 && length(line) + 1 + length(w) > room) {
      s = s line (cont == "" ? "" : " " cont) "\n"
      line = spaces(indent) w
    } else
      line = line (i > 1 ? " " : "") w
  }
  return s line
}

# W[] = the names of the variant's arguments (and ierror); returns the count.
function names(with_ierror,    i) {
  for (i = 1; i <= nv; i++) W[i] = vn[i]
  if (!with_ierror) return nv
  W[nv + 1] = "ierror"
  return nv + 1
}

# ---- Fortran: declarations and actual arguments -----------------------------

# The dummy of argument i in a Fortran procedure.  form: "ptr" or the
# dimension() of the first buffer of an array variant; asy: persistent.
function fdummy(i, form, asy,    t, a) {
  a = vo[i] ? ", optional" : ""
  if (vk[i] == "buf") {
    if (form == "ptr") return "type(c_ptr), intent(in)" a " :: " vn[i]
    t = "type(*), " (i == 1 ? form : "dimension(..)")
    t = t ", intent(" (vd[i] == "in" ? "in" : "inout") ")"
    return t (asy ? ", asynchronous" : "") a " :: " vn[i]
  }
  if (vk[i] == "i64") return "integer(c_int64_t), intent(in)" a " :: " vn[i]
  if (vk[i] == "enum") return "integer, intent(in) :: " vn[i]
  if (vk[i] == "logical") return "logical, intent(in) :: " vn[i]
  if (vk[i] == "double") return "real(c_double), intent(in) :: " vn[i]
  if (vk[i] == "comm") return "type(MKX_Comm), intent(in) :: " vn[i]
  if (vk[i] == "stream") return "type(c_ptr), intent(in), optional :: " vn[i]
  if (vk[i] == "scales")
    return "type(MKX_Scales), intent(in), optional :: " vn[i]
  if (vk[i] == "info") return "type(MPI_Info), intent(in) :: " vn[i]
  if (vk[i] == "request") return "type(MKX_Request), intent(out) :: " vn[i]
}

# What a Fortran procedure passes to its C interface for argument i.
function factual(i, form) {
  if (vk[i] == "buf" && form == "ptr" && vo[i]) return "opt_ptr(" vn[i] ")"
  if (vk[i] == "buf") return vn[i]
  if (vk[i] == "i64") return vo[i] ? "opt_i64(" vn[i] ")" : vn[i]
  if (vk[i] == "enum") return "int(" vn[i] ", c_int)"
  if (vk[i] == "logical") return "merge(1_c_int, 0_c_int, " vn[i] ")"
  if (vk[i] == "comm" || vk[i] == "request") return vn[i] "%ptr"
  if (vk[i] == "stream") return "opt_ptr(" vn[i] ")"
  # an absent optional stays absent: C receives NULL
  if (vk[i] == "scales") return vn[i]
  if (vk[i] == "info") return "int(" vn[i] "%MPI_VAL, c_int)"
  return vn[i]
}

# The dummy of argument i in a BIND(C) interface: by value, except arrays
# (descriptors, "a") and the request handle.
function cdummy(i, form,    t) {
  if (vk[i] == "buf" && form == "a") {
    t = "type(*), dimension(..)" (vd[i] == "in" ? ", intent(in)" : "")
    return t (vo[i] ? ", optional" : "") " :: " vn[i]
  }
  if (vk[i] == "buf" || vk[i] == "comm" || vk[i] == "stream")
    return "type(c_ptr), value :: " vn[i]
  if (vk[i] == "i64") return "integer(c_int64_t), value :: " vn[i]
  if (vk[i] == "double") return "real(c_double), value :: " vn[i]
  if (vk[i] == "request") return "type(c_ptr), intent(inout) :: " vn[i]
  if (vk[i] == "scales")
    return "type(MKX_Scales), intent(in), optional :: " vn[i]
  return "integer(c_int), value :: " vn[i]
}

# ---- Fortran: the interfaces to C -------------------------------------------

function c_interface(fname, cname, form,    cnt, i, imp, imp2) {
  cnt = names(0)
  print wrap("    function " fname "(", cnt, ")", 8, "&") " &" > spec
  print "        bind(C, name=\"" cname "\") result(rc)" > spec
  imp = "c_ptr, c_int, c_int64_t, c_double"
  for (i = 1; i <= nv; i++) if (vk[i] == "scales") imp2 = ", MKX_Scales"
  imp = imp imp2
  print "      import :: " imp > spec
  for (i = 1; i <= nv; i++) print "      " cdummy(i, form) > spec
  print "      integer(c_int) :: rc" > spec
  print "    end function " fname > spec
  print "" > spec
}

function op_interfaces(e,    s) {
  s = stem(name[e])
  variant(e, 0)
  c_interface("c_" s "_p", name[e], "p")
  if (init[e]) push_persistent()
  c_interface("c_" s "_a", "mkx_f08_" s "_a", "a")
  if (init[e]) {
    variant(e, 1)
    c_interface("c_" s "_init_p", "mkx_f08_" s "_init_p", "p")
  }
}

function query_interface(e,    f) {
  f = "c_" stem(name[e])
  W[1] = "comm"; W[2] = qout[e]
  print wrap("    function " f "(", 2, ")", 8, "&") " &" > spec
  print "        bind(C, name=\"" name[e] "\") result(rc)" > spec
  print "      import :: c_int, c_ptr" > spec
  print "      type(c_ptr), value :: comm" > spec
  print "      integer(c_int), intent(out) :: " qout[e] > spec
  print "      integer(c_int) :: rc" > spec
  print "    end function " f > spec
  print "" > spec
}

# ---- Fortran: generic interfaces --------------------------------------------

function generic(e, gname, spec_stem,    cnt, r) {
  cnt = 0
  W[++cnt] = spec_stem "_ptr"
  for (r = 1; r <= ranks[e]; r++) W[++cnt] = spec_stem "_r" r
  print "  interface " gname > spec
  print wrap("    module procedure ", cnt, "", 6, "&") > spec
  print "  end interface " gname > spec
  print "" > spec
}

# ---- Fortran: the procedures ------------------------------------------------

function query_proc(e) {
  printf "%s", doc[e] > procs
  print "  subroutine " name[e] "(comm, " qout[e] ", ierror)" > procs
  print "    type(MKX_Comm), intent(in) :: comm" > procs
  print "    integer, intent(out) :: " qout[e] > procs
  print "    integer, intent(out), optional :: ierror" > procs
  print "    integer(c_int) :: v, rc" > procs
  print "    call mkx_f08_clear_error()" > procs
  print "    v = " qinit[e] > procs
  print "    rc = c_" stem(name[e]) "(comm%ptr, v)" > procs
  print "    " qout[e] " = int(v)" > procs
  print "    call set_ierror(rc, ierror)" > procs
  print "  end subroutine " name[e] > procs
  print "" > procs
}

# One specific of an operation.  form: "ptr" (type(c_ptr) buffers, calls C
# directly, or the shim for _init), or dimension(...) of the first array.
function op_proc(e, pname, form, is_init,    cnt, i, callee, s) {
  variant(e, is_init)
  s = stem(name[e])
  cnt = names(1)
  print wrap("  subroutine " pname "(", cnt, ")", 6, "&") > procs
  for (i = 1; i <= nv; i++) print "    " fdummy(i, form, is_init) > procs
  print "    integer, intent(out), optional :: ierror" > procs
  print "    integer(c_int) :: rc" > procs
  if (form == "ptr") {
    print "    call mkx_f08_clear_error()" > procs
    callee = "c_" s (is_init ? "_init" : "") "_p"
    for (i = 1; i <= nv; i++) W[i] = factual(i, form)
    cnt = nv
  } else {
    # c_*_a takes stream, persistent, info, request where the operation
    # has an _init: the _init specific gives no stream, the call no request.
    callee = "c_" s "_a"
    cnt = 0
    for (i = 1; i <= nv; i++) {
      if (vk[i] == "info") { W[++cnt] = "c_null_ptr"; W[++cnt] = "1_c_int" }
      W[++cnt] = factual(i, form)
    }
    if (init[e] && !is_init) {
      print "    type(c_ptr) :: unused" > procs
      W[++cnt] = "0_c_int"; W[++cnt] = "0_c_int"; W[++cnt] = "unused"
    }
  }
  print wrap("    rc = " callee "(", cnt, ")", 8, "&") > procs
  print "    call set_ierror(rc, ierror)" > procs
  print "  end subroutine " pname > procs
  print "" > procs
}

function dims(r,    s) {
  s = ":"
  while (--r > 0) s = s ",:"
  return "dimension(" s ")"
}

function op_procs(e,    s, r) {
  s = "mkx_" stem(name[e])
  printf "%s", doc[e] > procs
  op_proc(e, s "_ptr", "ptr", 0)
  if (init[e]) op_proc(e, s "_init_ptr", "ptr", 1)
  for (r = 1; r <= ranks[e]; r++) {
    op_proc(e, s "_r" r, dims(r), 0)
    if (init[e]) op_proc(e, s "_init_r" r, dims(r), 1)
  }
}

# ---- C: the shim ------------------------------------------------------------

# The C parameter of argument i; form "a": buffers are descriptors.
function cparam(i, form) {
  if (vk[i] == "buf" && form == "a") return "const CFI_cdesc_t *" vn[i]
  if (vk[i] == "buf") return (vd[i] == "in" ? "const void *" : "void *") vn[i]
  if (vk[i] == "i64") return "int64_t " vn[i]
  if (vk[i] == "double") return "double " vn[i]
  if (vk[i] == "comm") return "MKX_Comm " vn[i]
  if (vk[i] == "stream") return "void *" vn[i]
  if (vk[i] == "info") return "MPI_Fint " vn[i]
  if (vk[i] == "request") return "MKX_Request *" vn[i]
  if (vk[i] == "scales") return "const MKX_Scales *" vn[i]
  return "int " vn[i]
}

# What the shim passes to MKX for argument i; form "a": buffers are the
# addresses read from their descriptors, and dtype may be refused.
function carg(i, form) {
  if (vk[i] == "buf" && form == "a") return vn[i] "_addr"
  if (vk[i] == "enum" && form == "a" && vn[i] == "dtype") return "dt"
  if (vk[i] == "enum") return "(" vt[i] ")" vn[i]
  if (vk[i] == "info") return "MPI_Info_f2c(" vn[i] ")"
  return vn[i]
}

function c_head(fname, form,    i) {
  for (i = 1; i <= nv; i++) W[i] = cparam(i, form)
  return wrap("int " fname "(", nv, ")", 4, "")
}

function c_call(lhs, fname, form, indent,    i) {
  for (i = 1; i <= nv; i++) W[i] = carg(i, form)
  return wrap(spaces(indent) lhs fname "(", nv, ");", indent + 4, "")
}

# ARG(...) of the shim for buffer i: element size, and type where fixed.
function arg_check(i,    c) {
  c = vc[i]
  if (c == "int32") c = "sizeof(int32_t), CFI_type_int32_t"
  else if (c == "int64") c = "sizeof(int64_t), CFI_type_int64_t"
  else if (c == "float") c = "sizeof(float), CFI_type_float"
  else c = "esize(" c "), -1"
  W[1] = "\"" vn[i] "\""; W[2] = vn[i]; W[3] = c; W[4] = "&" vn[i] "_addr"
  return wrap("  ARG(", 4, ");", 6, "")
}

function shim_init_p(e,    f, h) {
  variant(e, 1)
  f = "mkx_f08_" stem(name[e]) "_init_p"
  h = c_head(f, "p")
  print h ";" > shim
  print "" > shim
  print h " {" > shim
  print "  shim_failed = 0;" > shim
  print c_call("return ", name[e] "_init", "p", 2) > shim
  print "}" > shim
  print "" > shim
}

function shim_a(e,    f, h) {
  variant(e, 0)
  f = "mkx_f08_" stem(name[e]) "_a"
  if (init[e]) push_persistent()
  h = c_head(f, "a")
  print h ";" > shim
  print "" > shim
  print h " {" > shim
  shim_a_checks(e)
  if (init[e]) {
    print "  if (persistent)" > shim
    variant(e, 1)
    print c_call("mrc = ", name[e] "_init", "a", 4) > shim
    print "  else" > shim
    variant(e, 0)
    print c_call("mrc = ", name[e], "a", 4) > shim
  } else {
    variant(e, 0)
    print c_call("mrc = ", name[e], "a", 2) > shim
  }
  print "  return finish(rc, mrc);" > shim
  print "}" > shim
  print "" > shim
}

# The descriptors' addresses, checked; a refused array refuses dtype.
function shim_a_checks(e,    i, cnt) {
  if (init[e]) {
    print "  const char *fn = persistent ? \"" name[e] "_init\"" > shim
    print "                              : \"" name[e] "\";" > shim
  } else
    print "  const char *fn = \"" name[e] "\";" > shim
  cnt = 0
  for (i = 1; i <= nv; i++)
    if (vk[i] == "buf") W[++cnt] = "*" vn[i] "_addr = NULL"
  print wrap("  void ", cnt, ";", 7, "") > shim
  print "  int rc = MKX_SUCCESS, mrc;" > shim
  print "  shim_failed = 0;" > shim
  for (i = 1; i <= nv; i++) if (vk[i] == "buf") print arg_check(i) > shim
  print "  MKX_Datatype dt = rc == MKX_SUCCESS ? (MKX_Datatype)dtype" \
      " : BAD_DTYPE;" > shim
}

# ---- writing the files ------------------------------------------------------

function banner(file, c) {
  print c " Generated from src/fortran/mkx_f08.def by" \
      " sh src/fortran/mkx_f08_gen.sh;" > file
  print c " edit the table (or src/fortran/mkx_f08_gen.awk) and run that," \
      " not" > file
  print c " this file.  tests/fortran/f08_generated.sh checks that it is" \
      " current." > file
}

function write_spec(    e, cnt) {
  banner(spec, "!")
  print "" > spec
  cnt = 0
  for (e = 1; e <= n; e++) {
    W[++cnt] = name[e]
    if (kind[e] == "op" && init[e]) W[++cnt] = name[e] "_init"
  }
  print wrap("  public :: ", cnt, "", 4, "&") > spec
  print "" > spec
  print "  ! Operations: one specific for type(c_ptr) buffers (_ptr) and one" \
      " per rank" > spec
  print "  ! of the first buffer for arrays (_r1, _r2, ...)." > spec
  for (e = 1; e <= n; e++) {
    if (kind[e] != "op") continue
    generic(e, name[e], "mkx_" stem(name[e]))
    if (init[e]) generic(e, name[e] "_init", "mkx_" stem(name[e]) "_init")
  }
  print "  interface" > spec
  for (e = 1; e <= n; e++)
    if (kind[e] == "query") query_interface(e)
    else op_interfaces(e)
  print "  end interface" > spec
}

function write_procs(    e) {
  banner(procs, "!")
  print "" > procs
  for (e = 1; e <= n; e++)
    if (kind[e] == "query") query_proc(e)
    else op_procs(e)
}

function write_shim(    e) {
  print "/*" > shim
  banner(shim, " *")
  print " */" > shim
  print "" > shim
  for (e = 1; e <= n; e++) {
    if (kind[e] != "op") continue
    if (init[e]) shim_init_p(e)
    shim_a(e)
  }
}

END {
  if (failed) exit 1
  if (cur) fail("no end for op " name[cur])
  if (out == "") out = "."
  spec = out "/mkx_f08_gen_spec.inc"
  procs = out "/mkx_f08_gen_procs.inc"
  shim = out "/mkx_f08_gen_shim.inc"
  write_spec()
  write_procs()
  write_shim()
}
