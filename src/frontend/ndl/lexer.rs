//! NDL tokens with their 1-based line and column. Unknown characters become `Other` tokens
//! so that the parser can say what it expected at that place.

/// A place in the NDL text (1-based line and column, in characters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pos {
    pub line: usize,
    pub column: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    Ident(String),
    Num(f64),
    Str(String),
    /// One of `( ) { } [ ] , = . : * ; -`.
    Punct(char),
    Other(char),
}

#[derive(Clone, Debug)]
pub struct Token {
    pub tok: Tok,
    pub pos: Pos,
    /// The token's text as written (settings values are rebuilt from it).
    pub text: String,
}

impl Token {
    pub fn describe(&self) -> String {
        match &self.tok {
            Tok::Ident(s) => format!("'{s}'"),
            Tok::Num(_) => format!("number '{}'", self.text),
            Tok::Str(s) => format!("string \"{s}\""),
            Tok::Punct(c) | Tok::Other(c) => format!("'{c}'"),
        }
    }
}

/// Splits NDL text into tokens; `#` starts a comment to the end of the line. Fails only on
/// an unterminated string (the position of its opening quote).
pub fn tokenize(text: &str) -> Result<Vec<Token>, (Pos, String)> {
    let mut out = Vec::new();
    for (li, line) in text.lines().enumerate() {
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            let pos = Pos {
                line: li + 1,
                column: i + 1,
            };
            if c == '#' {
                break;
            }
            if c.is_whitespace() {
                i += 1;
                continue;
            }
            let start = i;
            let tok = if c.is_ascii_alphabetic() || c == '_' {
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                Tok::Ident(chars[start..i].iter().collect())
            } else if c.is_ascii_digit()
                || (c == '.' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
            {
                while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                    i += 1;
                }
                // An exponent only when digits follow it.
                if i < chars.len() && (chars[i] == 'e' || chars[i] == 'E') {
                    let mut j = i + 1;
                    if j < chars.len() && (chars[j] == '+' || chars[j] == '-') {
                        j += 1;
                    }
                    if j < chars.len() && chars[j].is_ascii_digit() {
                        while j < chars.len() && chars[j].is_ascii_digit() {
                            j += 1;
                        }
                        i = j;
                    }
                }
                let s: String = chars[start..i].iter().collect();
                match s.parse::<f64>() {
                    Ok(v) => Tok::Num(v),
                    Err(_) => return Err((pos, format!("'{s}' is not a number"))),
                }
            } else if c == '"' || c == '\'' {
                i += 1;
                while i < chars.len() && chars[i] != c {
                    i += 1;
                }
                if i == chars.len() {
                    return Err((pos, "unterminated string".into()));
                }
                i += 1;
                Tok::Str(chars[start + 1..i - 1].iter().collect())
            } else {
                i += 1;
                if "(){}[],=.:*;-".contains(c) {
                    Tok::Punct(c)
                } else {
                    Tok::Other(c)
                }
            };
            out.push(Token {
                tok,
                pos,
                text: chars[start..i].iter().collect(),
            });
        }
    }
    Ok(out)
}
