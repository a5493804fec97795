# Writes a C++ source holding the text of SQL files, run at build time:
#   cmake -DSQL_DIR=<dir> -DSCHEMA=<a|b> -DMIGRATIONS=<c|d> -DOUTPUT=<file.cc> -P embed_sql.cmake
# (file lists separated by "|", paths under SQL_DIR).
# Each file becomes a raw string literal. The delimiter cannot occur in SQL idem writes; a file
# that contains it anyway stops the build rather than ending the literal early.
set(delimiter "idem_sql_file")
string(REPLACE "|" ";" SCHEMA "${SCHEMA}")
string(REPLACE "|" ";" MIGRATIONS "${MIGRATIONS}")

function(append_files array_name files)
  file(APPEND "${OUTPUT}.tmp" "const SqlFile ${array_name}[] = {\n")
  foreach(name IN LISTS files)
    file(READ "${SQL_DIR}/${name}" text)
    string(FIND "${text}" ")${delimiter}\"" found)
    if(NOT found EQUAL -1)
      message(FATAL_ERROR "${SQL_DIR}/${name} contains )${delimiter}\", which ends a raw string")
    endif()
    file(APPEND "${OUTPUT}.tmp" "    {\"${name}\", R\"${delimiter}(${text})${delimiter}\"},\n")
  endforeach()
  file(APPEND "${OUTPUT}.tmp" "};\n\n")
endfunction()

file(WRITE "${OUTPUT}.tmp"
  "// Generated at build time by cmake/embed_sql.cmake from the files of sql/ (listed in\n"
  "// sql/sql_files.cmake). Do not edit: edit the SQL files.\n"
  "#include \"pg/pg_sql_files.h\"\n\n"
  "namespace idem::internal::pg {\n"
  "namespace {\n\n")
append_files(kSchema "${SCHEMA}")
append_files(kMigrations "${MIGRATIONS}")
file(APPEND "${OUTPUT}.tmp"
  "}  // namespace\n\n"
  "std::span<const SqlFile> SchemaFiles() { return kSchema; }\n"
  "std::span<const SqlFile> MigrationFiles() { return kMigrations; }\n\n"
  "}  // namespace idem::internal::pg\n")
# Only a changed text touches the output, so an unchanged one does not rebuild its users.
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
