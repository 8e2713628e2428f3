// Parser of .tsl: tokens -> ast::File. Recursive descent with precedence climbing; expression
// trees deeper than kMaxExpressionDepth are rejected with a UserError (never a stack overflow).
//
//   file      := def*
//   def       := 'def' NAME '(' [tensor {',' tensor}] ')' '->' '(' tensor {',' tensor} ')'
//                '{' statement* '}'
//   tensor    := DTYPE '[' [expr {',' expr}] ']' NAME
//   statement := NAME '(' [NAME {',' NAME}] ')' assign expr ['where' range {',' range}]
//   assign    := '=' | '+=' | '+=!' | '*=' | '*=!' | 'max=' | 'max=!' | 'min=' | 'min=!'
//   range     := NAME 'in' expr ':' expr
//   expr      := or;  or := and {'||' and};  and := cmp {'&&' cmp}
//   cmp       := sum [('=='|'!='|'<'|'<='|'>'|'>=') sum]
//   sum       := term {('+'|'-') term};  term := unary {('*'|'/'|'%') unary}
//   unary     := ('-'|'!') unary | primary
//   primary   := INT | REAL | NAME | NAME '(' [expr {',' expr}] ')' | '(' expr ')'
#pragma once

#include "compiler/frontend/ast.h"
#include "compiler/frontend/diagnostics.h"

namespace tessel::frontend {

ast::File parse_file(const Source& src);

}  // namespace tessel::frontend
