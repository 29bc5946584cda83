# aa_readme_c_block(<README.md> <out.c>)
#
# Writes the README's C example to <out.c>: the first ```c fence after the
# comment that names tests/readme.cmake, up to its closing fence, byte for
# byte. Fails, naming what is missing, when the README has no such block, so
# that a README edit cannot silently drop the example from the tests. Used at
# configure time by tests/readme.cmake (the in-tree build) and at test time
# by tests/install/check.cmake (the build against an installed tree).
function(aa_readme_c_block readme out)
  file(READ ${readme} _text)
  string(FIND "${_text}" "<!-- tests/readme.cmake builds" _mark)
  if(_mark LESS 0)
    message(FATAL_ERROR "${readme}: no '<!-- tests/readme.cmake builds' comment "
      "before the C example")
  endif()
  string(SUBSTRING "${_text}" ${_mark} -1 _text)
  string(FIND "${_text}" "\n```c\n" _open)
  if(_open LESS 0)
    message(FATAL_ERROR "${readme}: no ```c fence after the tests/readme.cmake comment")
  endif()
  math(EXPR _open "${_open} + 6")
  string(SUBSTRING "${_text}" ${_open} -1 _text)
  string(FIND "${_text}" "\n```" _close)
  if(_close LESS 0)
    message(FATAL_ERROR "${readme}: the C example's fence is not closed")
  endif()
  math(EXPR _close "${_close} + 1")
  string(SUBSTRING "${_text}" 0 ${_close} _code)
  file(WRITE ${out}.tmp "${_code}")
  configure_file(${out}.tmp ${out} COPYONLY)
endfunction()
